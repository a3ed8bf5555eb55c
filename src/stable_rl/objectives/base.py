"""The contract every objective follows: pure tensor functions behind a thin callable class.

An objective maps one micro-batch's ``LossInputs`` to a per-token loss. The caller sums it and
divides by the objective's ``normalizer``, a constant computed once over the whole mini-batch, so
the gradient does not depend on how the mini-batch is split into micro-batches.
"""

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch
from torch import Tensor

from stable_rl.objectives.advantages import group_advantages

SETTINGS = "model.init_args.objective.init_args"  # where the stable-rl CLI reads an objective's arguments


@dataclass(frozen=True)
class LossInputs:
    """The tensors of one micro-batch, position-aligned: ``[M, T]`` unless said otherwise.

    Args:
        logprobs: log pi_theta(y_t) of the sampled tokens, with gradient.
        old_logprobs: log pi_old(y_t), recomputed by the training engine, no gradient.
        rollout_logprobs: log mu_old(y_t), reported by the inference engine.
        advantages: ``[M]`` one advantage per response, or ``[M, T]`` one per token.
        response_mask: bool, True on response tokens.
        ref_logprobs: log pi_ref(y_t) of a reference policy, for a KL-to-reference term; None: not computed.
    """

    logprobs: Tensor
    old_logprobs: Tensor
    rollout_logprobs: Tensor
    advantages: Tensor
    response_mask: Tensor
    ref_logprobs: Tensor | None = None


@dataclass(frozen=True)
class LossOutput:
    """``token_loss`` [M, T] (zero off the response); ``token_metrics`` name -> [M, T], detached, averaged over
    response tokens; ``sequence_metrics`` name -> [M], detached, averaged over responses."""

    token_loss: Tensor
    token_metrics: dict[str, Tensor]
    sequence_metrics: dict[str, Tensor] = field(default_factory=dict)


class Objective(ABC):
    """A policy-gradient objective over sampled responses.

    Args:
        std_normalize: divide group-baseline advantages by the group's reward std (GRPO-style).
    """

    def __init__(self, std_normalize: bool) -> None:
        self.std_normalize = std_normalize

    def advantages(self, rewards: Tensor) -> Tensor:
        """Group-baseline advantages; ``rewards`` [P, G] (P prompts, G responses each) -> [P, G]."""
        return group_advantages(rewards, std_normalize=self.std_normalize)

    @abstractmethod
    def normalizer(self, response_mask: Tensor) -> Tensor:
        """The constant the summed token loss of a whole mini-batch is divided by; ``response_mask`` [M, T]
        bool -> scalar."""

    @abstractmethod
    def __call__(self, inputs: LossInputs) -> LossOutput:
        """Per-token loss of one micro-batch."""


def per_token(advantages: Tensor) -> Tensor:
    """Advantages [M] (one per response) as [M, 1], or [M, T] as they are: broadcastable over tokens."""
    return advantages[:, None] if advantages.dim() == 1 else advantages


def sequence_count(response_mask: Tensor) -> Tensor:
    """The number of responses M; ``response_mask`` [M, T] -> scalar float."""
    return torch.tensor(float(response_mask.shape[0]))


def token_count(response_mask: Tensor) -> Tensor:
    """The number of response tokens, at least 1; ``response_mask`` [M, T] -> scalar float."""
    return response_mask.sum().clamp(min=1).float()


def response_lengths(response_mask: Tensor) -> Tensor:
    """|y_i| per response, at least 1; ``response_mask`` [M, T] -> [M, 1] float."""
    return response_mask.sum(dim=-1, keepdim=True).clamp(min=1).float()


def check_clip_range(eps_low: float, eps_high: float) -> None:
    """Refuse a clip range [1 - eps_low, 1 + eps_high] on pi_theta/pi_old that does not hold the ratio 1 of an
    unchanged policy with a positive lower bound (beyond it, the clipped weight is 0 or negative)."""
    if not 0 <= eps_low < 1:
        raise ValueError(
            f"{SETTINGS}.eps_low={eps_low}: the ratio's lower clip bound 1 - eps_low must lie in (0, 1], "
            "so eps_low must be in [0, 1)"
        )
    if not eps_high >= 0:
        raise ValueError(
            f"{SETTINGS}.eps_high={eps_high}: the ratio's upper clip bound 1 + eps_high must be at least 1, "
            "so eps_high must be >= 0"
        )


def check_positive_is_cap(is_cap: float) -> None:
    """Refuse a truncation C of the training-inference IS weight that is not positive (log C is taken)."""
    if not is_cap > 0:
        raise ValueError(
            f"{SETTINGS}.is_cap={is_cap}: the importance weight is truncated at is_cap, so is_cap must be > 0 "
            "(the paper: 5)"
        )
