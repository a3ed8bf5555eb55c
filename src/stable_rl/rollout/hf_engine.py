"""A rollout engine on HF ``generate``, for machines without vLLM (same interface, same tests)."""

from collections.abc import Iterable

import torch
from torch import Tensor
from transformers import AutoModelForCausalLM, GenerationConfig, PreTrainedModel

from stable_rl.rollout.engine import RolloutEngine, Sample, Sampling


class HFEngine(RolloutEngine):
    """Samples with a private copy of the policy (in the engine's own ``dtype``) via ``generate``.

    Log mu_old are taken from the processed scores, i.e. of the tempered, top-p-filtered
    distribution the tokens were drawn from. Args as in ``RolloutEngine``.
    """

    model: PreTrainedModel

    def start(self, model_path: str, max_model_len: int) -> None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, self.dtype))
        self.model.to(device).eval().requires_grad_(False)

    def _generation_config(self, sampling: Sampling) -> GenerationConfig:
        return GenerationConfig(
            do_sample=sampling.temperature > 0,
            temperature=sampling.temperature if sampling.temperature > 0 else None,
            top_p=sampling.top_p,
            top_k=0,
            max_new_tokens=sampling.max_new_tokens,
            eos_token_id=self.model.generation_config.eos_token_id,
            pad_token_id=self.model.generation_config.pad_token_id,
        )

    def load_weights(self, named_tensors: Iterable[tuple[str, Tensor]]) -> None:
        self.model.load_state_dict(dict(named_tensors), strict=True)

    @torch.no_grad()
    def generate(
        self, prompt_ids: list[list[int]], group_size: int, step: int, sampling: Sampling | None = None
    ) -> list[Sample]:
        config = self._generation_config(sampling or self.sampling)
        pad, eos = config.pad_token_id, config.eos_token_id
        width = max(map(len, prompt_ids))
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompt_ids])  # [P, W] left-padded
        attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids])
        device = self.model.device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(self.request_seed(step, 0))
            out = self.model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention_mask.to(device),
                generation_config=config,
                num_return_sequences=group_size,
                return_dict_in_generate=True,
                output_scores=True,
            )
        responses = out.sequences[:, width:].cpu()  # [P*G, N]
        scores = torch.stack(out.scores, dim=1).float().log_softmax(-1).cpu()  # [P*G, N, V]
        logprobs = scores.gather(-1, responses[..., None])[..., 0]  # [P*G, N]
        samples = []
        for row, (tokens, lps) in enumerate(zip(responses.tolist(), logprobs.tolist(), strict=True)):
            length = tokens.index(eos) + 1 if eos in tokens else len(tokens)
            samples.append(Sample(prompt_ids[row // group_size], tokens[:length], lps[:length]))
        return samples

    def close(self) -> None:
        self.model = None
