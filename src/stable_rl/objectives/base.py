"""The contract every objective follows: pure tensor functions behind a thin callable class.

An objective maps the log-probs of one mini-batch to a per-token loss. The caller sums it and
divides by a constant computed once over the whole mini-batch (``Objective.normalizer``), so
the gradient does not depend on how the mini-batch is split into micro-batches.
"""

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from stable_rl.objectives.advantages import group_advantages


@dataclass(frozen=True)
class LossOutput:
    """``token_loss`` [M, T] (zero off the response); ``token_metrics`` name -> [M, T], detached."""

    token_loss: Tensor
    token_metrics: dict[str, Tensor]


class Objective(ABC):
    """A policy-gradient objective over sampled responses.

    Args:
        std_normalize: divide group-baseline advantages by the group's reward std (GRPO-style).
        normalize_by: the constant the summed token loss is divided by: the number of
            ``"sequences"`` or of response ``"tokens"`` in the mini-batch.
    """

    def __init__(self, std_normalize: bool, normalize_by: Literal["sequences", "tokens"]) -> None:
        self.std_normalize = std_normalize
        self.normalize_by = normalize_by

    def advantages(self, rewards: Tensor) -> Tensor:
        """Group-baseline advantages; ``rewards`` [P, G] (P prompts, G responses each) -> [P, G]."""
        return group_advantages(rewards, std_normalize=self.std_normalize)

    def normalizer(self, response_mask: Tensor) -> Tensor:
        """The constant for a whole mini-batch; ``response_mask`` [M, T] bool -> scalar."""
        if self.normalize_by == "sequences":
            return torch.tensor(float(response_mask.shape[0]))
        return response_mask.sum().clamp(min=1).float()

    @abstractmethod
    def __call__(
        self,
        logprobs: Tensor,
        old_logprobs: Tensor,
        rollout_logprobs: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
    ) -> LossOutput:
        """Per-token loss.

        Args:
            logprobs: [M, T] log pi_theta(y_t) of the sampled tokens, with gradient.
            old_logprobs: [M, T] log pi_old(y_t), recomputed by the training engine, no gradient.
            rollout_logprobs: [M, T] log mu_old(y_t), reported by the inference engine.
            advantages: [M] one advantage per response.
            response_mask: [M, T] bool, True on response tokens.
        """


def response_lengths(response_mask: Tensor) -> Tensor:
    """|y_i| per response, at least 1; ``response_mask`` [M, T] -> [M, 1] float."""
    return response_mask.sum(dim=-1, keepdim=True).clamp(min=1).float()
