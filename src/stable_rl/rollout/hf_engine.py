"""A rollout engine on HF ``generate``, for machines without vLLM (same interface, same tests)."""

from collections.abc import Iterable
from contextlib import nullcontext

import torch
from torch import Tensor
from transformers import AutoModelForCausalLM, GenerationConfig, PreTrainedModel

from stable_rl.dtypes import Dtype
from stable_rl.padding import pad_id, right_pad
from stable_rl.policy.logprobs import sequence_logprobs
from stable_rl.rollout.engine import RolloutEngine, Sample, Sampling
from stable_rl.rollout.fp8 import quantize_linear_inputs, quantize_weights_, use_fp8_kv_cache
from stable_rl.rollout.low_precision import FORMATS
from stable_rl.routing.hooks import ROUTE_DTYPE, RouterHooks


class HFEngine(RolloutEngine):
    """Samples with a private copy of the policy (in the engine's own ``dtype``) via ``generate``.

    Log mu_old are rescored by one forward pass of the engine's own model at the sampling
    temperature (training samples from the full distribution, top_p = 1); with ``return_routes`` the
    same pass records each token's routed experts. Arguments not listed are as in ``RolloutEngine``.

    Args:
        quantization: simulate low-precision inference (``stable_rl.rollout.fp8``), a training-inference
            gap like the paper's FP8 one: matrix weights and layer inputs rounded to "fp8_per_channel"
            (e4m3, a scale per output row / per token), "fp8_per_tensor" (e4m3, a scale per weight or
            expert / per activation tensor), "e5m2" (per row / per token) or "fp4" (NVFP4-like e2m1 in
            blocks of 16); None: none. vLLM's option names, so a recipe reads the same in both engines.
        quantize_router: also round the MoE routers' weights and inputs (vLLM keeps them in 16 bits).
        kv_cache_dtype: "fp8": attention reads keys and values rounded to e4m3 (scale 1.0), as vLLM's FP8
            KV cache holds them; "auto": as computed.
        fp8: alias of ``quantization="fp8_per_channel"``.
        cache_implementation: transformers' KV cache for ``generate`` ("static" preallocates it and lets
            transformers compile the decoding step on GPUs); None = transformers' default (dynamic).
    """

    model: PreTrainedModel | None = None

    def __init__(
        self,
        max_new_tokens: int = 64,
        temperature: float = 1.0,
        top_p: float = 1.0,
        dtype: Dtype = "float32",
        seed: int | None = None,
        return_routes: bool = False,
        fp8: bool = False,
        cache_implementation: str | None = None,
        quantization: str | None = None,
        quantize_router: bool = False,
        kv_cache_dtype: str = "auto",
        weight_noise: float = 0.0,
    ) -> None:
        super().__init__(max_new_tokens, temperature, top_p, dtype, seed, return_routes, weight_noise)
        self.quantization = _simulated_quantization(quantization, fp8)
        self.quantize_router = _check_quantize_router(quantize_router, self.quantization)
        self.kv_cache_dtype = _check_kv_cache_dtype(kv_cache_dtype)
        self.cache_implementation = cache_implementation

    def start(self, model_path: str, max_model_len: int) -> None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, self.dtype))
        self.model.to(device).eval().requires_grad_(False)
        if self.quantization:
            quantize_weights_(self.model, self.quantization, self.quantize_router)
            quantize_linear_inputs(self.model, self.quantization, self.quantize_router)
        if self.kv_cache_dtype == "fp8":
            use_fp8_kv_cache(self.model)
        if self.return_routes:
            RouterHooks(self.model)  # a dense or unsupported model fails here, not at the first rollout

    def _generation_config(self, sampling: Sampling) -> GenerationConfig:
        ids = {
            "eos_token_id": self.model.generation_config.eos_token_id,
            "pad_token_id": pad_id(self.model.generation_config),  # Llama-3 style configs have none
            "cache_implementation": self.cache_implementation,
        }
        if sampling.temperature == 0:
            return GenerationConfig(do_sample=False, max_new_tokens=sampling.max_new_tokens, **ids)
        return GenerationConfig(
            do_sample=True,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=0,
            max_new_tokens=sampling.max_new_tokens,
            **ids,
        )

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[tuple[str, Tensor]]) -> None:
        """Copy each weight in as it comes (a stream gathered from shards is never held whole)."""
        own, loaded = self.model.state_dict(), set()
        for name, tensor in named_tensors:
            if name not in own:
                raise KeyError(f"weight {name!r} is not in the engine's model {type(self.model).__name__}")
            own[name].copy_(tensor)
            loaded.add(name)
        if missing := sorted(own.keys() - loaded):
            raise KeyError(f"{len(missing)} of the engine's weights were not synced, e.g. {missing[:3]}")
        if self.quantization:
            quantize_weights_(self.model, self.quantization, self.quantize_router)

    @torch.no_grad()
    def generate(
        self,
        prompt_ids: list[list[int]],
        group_size: int,
        step: int,
        sampling: Sampling | None = None,
        first_index: int = 0,
    ) -> list[Sample]:
        stream, with_routes = self.stream(sampling), self.with_routes(sampling)
        sampling = sampling or self.sampling
        config = self._generation_config(sampling)
        config.num_return_sequences = group_size
        eos = set(config.eos_token_id if isinstance(config.eos_token_id, list) else [config.eos_token_id])
        width = max(map(len, prompt_ids))
        input_ids = torch.tensor([[config.pad_token_id] * (width - len(p)) + p for p in prompt_ids])  # [P, W]
        attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids])
        device = self.model.device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(self.request_seed(step, first_index, group_size, stream))
            sequences = self.model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention_mask.to(device),
                generation_config=config,
            )
        responses = []
        for tokens in sequences[:, width:].tolist():  # [P*G, N], padded after the first EOS
            end = next((i + 1 for i, token in enumerate(tokens) if token in eos), len(tokens))
            responses.append(tokens[:end])
        temperature = sampling.temperature or 1.0  # greedy: the raw distribution
        return self._score(prompt_ids, responses, group_size, temperature, with_routes)

    def _score(self, prompt_ids, responses, group_size: int, temperature: float, with_routes: bool) -> list[Sample]:
        """log mu_old of each sampled token: one forward of the engine's model at the temperature
        (no per-step [batch, vocab] scores kept during generation)."""
        rows = [(prompt_ids[i // group_size], response) for i, response in enumerate(responses)]
        input_ids, attention_mask, response_mask = right_pad(rows, pad_token_id=0)
        device = self.model.device
        hooks = RouterHooks(self.model) if with_routes else None
        with hooks.record(input_ids) if hooks else nullcontext():
            logprobs, _ = sequence_logprobs(
                self.model,
                input_ids.to(device),
                attention_mask.to(device),
                response_mask.to(device),
                temperature,
                entropy=False,
            )
        logprobs = logprobs.float().cpu()
        routes = hooks.own.to("cpu", ROUTE_DTYPE).numpy() if hooks else None  # [M, L, layers, k]
        return [
            Sample(
                prompt,
                response,
                logprobs[i][response_mask[i]].tolist(),
                routes=routes[i, : len(prompt) + len(response) - 1] if hooks else None,
            )
            for i, (prompt, response) in enumerate(rows)
        ]

    def close(self) -> None:
        self.model = None
        self.version = None

    @property
    def running(self) -> bool:
        return self.model is not None


def _simulated_quantization(quantization: str | None, fp8: bool) -> str | None:
    """The format the HF engine rounds to; ``fp8`` is the alias of "fp8_per_channel"."""
    if fp8 and quantization not in (None, "fp8_per_channel"):
        raise ValueError(
            f"data.engine.init_args.fp8: true is the alias of quantization: fp8_per_channel, but quantization is "
            f"{quantization!r}: set data.engine.init_args.fp8: false to use quantization: {quantization}"
        )
    quantization = quantization or ("fp8_per_channel" if fp8 else None)
    if quantization is not None and quantization not in FORMATS:
        vllm_alias = (
            " (vLLM reads 'fp8' as fp8_per_tensor; fp8: true is fp8_per_channel)" if quantization == "fp8" else ""
        )
        raise ValueError(
            f"data.engine.init_args.quantization: {quantization!r} is not one the HF engine simulates: "
            f"use one of {', '.join(FORMATS)}, or null for none{vllm_alias}"
        )
    return quantization


def _check_quantize_router(quantize_router: bool, quantization: str | None) -> bool:
    if quantize_router and quantization is None:
        raise ValueError(
            "data.engine.init_args.quantize_router: true rounds the MoE routers to the quantization format, but "
            "quantization is null: set data.engine.init_args.quantization (e.g. fp8_per_channel)"
        )
    return quantize_router


def _check_kv_cache_dtype(kv_cache_dtype: str) -> str:
    if kv_cache_dtype not in ("auto", "fp8"):
        raise ValueError(
            f"data.engine.init_args.kv_cache_dtype: {kv_cache_dtype!r} is not one the HF engine simulates: "
            "use auto (as computed) or fp8 (e4m3 keys and values)"
        )
    return kv_cache_dtype
