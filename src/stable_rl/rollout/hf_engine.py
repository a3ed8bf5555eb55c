"""A rollout engine on HF ``generate``, for machines without vLLM (same interface, same tests)."""

from collections.abc import Iterable
from contextlib import nullcontext

import torch
from torch import Tensor
from transformers import AutoModelForCausalLM, GenerationConfig, PreTrainedModel

from stable_rl.logprobs import sequence_logprobs
from stable_rl.padding import pad_id, right_pad
from stable_rl.rollout.engine import Dtype, RolloutEngine, Sample, Sampling
from stable_rl.rollout.fp8 import quantize_linear_inputs, quantize_weights_
from stable_rl.routing.hooks import ROUTE_DTYPE, RouterHooks


class HFEngine(RolloutEngine):
    """Samples with a private copy of the policy (in the engine's own ``dtype``) via ``generate``.

    Log mu_old are rescored by one forward pass of the engine's own model at the sampling
    temperature (training samples from the full distribution, top_p = 1); with ``return_routes`` the
    same pass records each token's routed experts.

    Args:
        fp8: simulate FP8 (e4m3) inference: matrix weights and linear-layer inputs rounded to e4m3 with
            per-row scales (``stable_rl.rollout.fp8``), a training-inference gap like the paper's.
        cache_implementation: transformers' KV cache for ``generate`` ("static" preallocates it and lets
            transformers compile the decoding step on GPUs); None = transformers' default (dynamic).
        Others as in ``RolloutEngine``.
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
    ) -> None:
        super().__init__(max_new_tokens, temperature, top_p, dtype, seed, return_routes)
        self.fp8 = fp8
        self.cache_implementation = cache_implementation

    def start(self, model_path: str, max_model_len: int) -> None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, self.dtype))
        self.model.to(device).eval().requires_grad_(False)
        if self.fp8:
            quantize_weights_(self.model)
            quantize_linear_inputs(self.model)
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
        if self.fp8:
            quantize_weights_(self.model)

    @torch.no_grad()
    def generate(
        self, prompt_ids: list[list[int]], group_size: int, step: int, sampling: Sampling | None = None
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
            torch.manual_seed(self.request_seed(step, 0, group_size, stream))
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
