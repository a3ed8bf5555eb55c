"""GRPO, the paper's appendix baseline (no training-inference IS correction).

    J(theta) = (1/G) sum_i (1/|y_i|) sum_t min(r_t A_i, clip(r_t, 1 - eps_low, 1 + eps_high) A_i)

with r_t = pi_theta/pi_old and group-std-normalised advantages; averaged over the prompts of the
mini-batch (the caller divides the summed token loss by the number of responses).
"""

import torch
from torch import Tensor

from stable_rl.objectives.base import (
    LossInputs,
    LossOutput,
    Objective,
    check_clip_range,
    per_token,
    response_lengths,
    sequence_count,
)

LOG_RATIO_BOUND = 20.0  # |log r_t| beyond this is clamped before exp (as verl does): e^88 overflows float32


def grpo_token_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.27,
) -> LossOutput:
    """Negative of the GRPO summand per token; shapes as in ``LossInputs``."""
    out = clipped_surrogate_loss(logprobs, old_logprobs, advantages, response_mask, eps_low, eps_high)
    return LossOutput(out.token_loss / response_lengths(response_mask), out.token_metrics)  # [M, T]


def clipped_surrogate_loss(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, response_mask: Tensor, eps_low: float, eps_high: float
) -> LossOutput:
    """-min(r_t A, clip(r_t, 1 - eps_low, 1 + eps_high) A) on response tokens, not length-normalised (PPO's
    clipped surrogate); shapes as in ``LossInputs``."""
    advantages = per_token(advantages)  # [M, 1] or [M, T]
    # [M, T], with gradient; tokens more than 20 nats apart get the bound's ratio and no gradient, where
    # an unbounded exp would give inf (and inf * 0 = NaN for a zero advantage)
    ratio = torch.exp((logprobs - old_logprobs).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    unclipped = ratio * advantages
    clipped = ratio.clamp(1 - eps_low, 1 + eps_high) * advantages
    surrogate = torch.minimum(unclipped, clipped)  # [M, T]
    return LossOutput(
        token_loss=-(surrogate * response_mask),  # [M, T]
        token_metrics={"clip_fraction": ((clipped < unclipped) & response_mask).float()},
    )


class GRPO(Objective):
    """GRPO with PPO-style clipping (the paper's appendix baseline).

    Args:
        eps_low: lower clipping bound on pi_theta/pi_old.
        eps_high: upper clipping bound on pi_theta/pi_old.
        std_normalize: divide advantages by the group's reward std (GRPO's definition).
    """

    def __init__(self, eps_low: float = 0.2, eps_high: float = 0.27, std_normalize: bool = True) -> None:
        super().__init__(std_normalize=std_normalize)
        check_clip_range(eps_low, eps_high)
        self.eps_low, self.eps_high = eps_low, eps_high

    def normalizer(self, response_mask: Tensor) -> Tensor:
        """The number of responses (GRPO's mean over the group, and over prompts)."""
        return sequence_count(response_mask)

    def __call__(self, inputs: LossInputs) -> LossOutput:
        return grpo_token_loss(
            inputs.logprobs, inputs.old_logprobs, inputs.advantages, inputs.response_mask, self.eps_low, self.eps_high
        )
