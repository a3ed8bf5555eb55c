"""MiniRL: REINFORCE with truncated training-inference IS and decoupled clipping (paper Eq. 7).

    J(theta) = E_x E_{y~mu_old} [ sum_t M_t * sg[min(pi_theta(y_t)/mu_old(y_t), C)] * A * log pi_theta(y_t) ]

with A = R - group mean (no std division), C = 5, and the mask
M_t = 0 if A > 0 and pi_theta/pi_old > 1 + eps_high, or A < 0 and pi_theta/pi_old < 1 - eps_low.
The token sum is not length-normalised; the caller divides by the number of responses.
The paper's ablations are flags: ``length_norm`` ("w/ length-norm": each response's sum times
1/|y|) and ``train_infer_is=False`` ("w/o train-infer IS": the weight is dropped).
"""

import math

import torch
from torch import Tensor

from stable_rl.objectives.base import (
    LossInputs,
    LossOutput,
    Objective,
    check_clip_range,
    check_positive_is_cap,
    per_token,
    response_lengths,
    sequence_count,
)


def decoupled_clip_mask(ratio: Tensor, advantages: Tensor, eps_low: float, eps_high: float) -> Tensor:
    """M_t of Eq. 7: False where the update would push r_t = pi_theta/pi_old past its bound.

    ``ratio`` [M, T], ``advantages`` [M, 1] -> bool [M, T].
    """
    too_high = (advantages > 0) & (ratio > 1 + eps_high)
    too_low = (advantages < 0) & (ratio < 1 - eps_low)
    return ~(too_high | too_low)


def minirl_token_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    rollout_logprobs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    is_cap: float = 5.0,
    eps_low: float = 0.2,
    eps_high: float = 0.27,
    clip: bool = True,
    length_norm: bool = False,
    train_infer_is: bool = True,
) -> LossOutput:
    """Negative of the Eq. 7 summand per token; shapes as in ``LossInputs``."""
    advantages = per_token(advantages)  # [M, 1] or [M, T]
    detached = logprobs.detach()  # [M, T]
    log_is = detached - rollout_logprobs  # [M, T] log pi_theta/mu_old
    is_weight = torch.exp(log_is.clamp(max=math.log(is_cap)))  # [M, T] = min(pi_theta/mu_old, C)
    applied = is_weight if train_infer_is else torch.ones_like(is_weight)  # the ablation drops it
    ratio = torch.exp(detached - old_logprobs)  # [M, T] pi_theta/pi_old
    keep = decoupled_clip_mask(ratio, advantages, eps_low, eps_high) if clip else torch.ones_like(response_mask)
    keep = keep & response_mask  # [M, T]
    token_loss = -(keep * applied * advantages * logprobs)  # [M, T]
    if length_norm:
        token_loss = token_loss / response_lengths(response_mask)
    return LossOutput(
        token_loss=token_loss,
        token_metrics={
            "is_weight": is_weight,  # what MiniRL would apply, also logged when the ablation drops it
            "is_truncated": (log_is > math.log(is_cap)).float(),
            "clip_fraction": (~keep & response_mask).float(),
        },
    )


class MiniRL(Objective):
    """MiniRL (paper Eq. 7) and its ablations.

    Args:
        is_cap: truncation C of the training-inference IS weight (paper: 5).
        eps_low: lower clipping bound on pi_theta/pi_old for negative advantages (paper: 0.2).
        eps_high: upper clipping bound for positive advantages (paper: 0.27).
        clip: apply the decoupled clipping mask M_t (off for the paper's "w/o clipping" runs).
        length_norm: ablation "w/ length-norm": scale each response's token sum by 1/|y|.
        train_infer_is: False for the ablation "w/o train-infer IS" (weight 1 for every token).
    """

    def __init__(
        self,
        is_cap: float = 5.0,
        eps_low: float = 0.2,
        eps_high: float = 0.27,
        clip: bool = True,
        length_norm: bool = False,
        train_infer_is: bool = True,
    ) -> None:
        super().__init__(std_normalize=False)
        check_clip_range(eps_low, eps_high)
        check_positive_is_cap(is_cap)
        self.is_cap = is_cap
        self.eps_low = eps_low
        self.eps_high = eps_high
        self.clip = clip
        self.length_norm = length_norm
        self.train_infer_is = train_infer_is

    def normalizer(self, response_mask: Tensor) -> Tensor:
        """The number of responses (the expectation over x and y)."""
        return sequence_count(response_mask)

    def __call__(self, inputs: LossInputs) -> LossOutput:
        return minirl_token_loss(
            inputs.logprobs,
            inputs.old_logprobs,
            inputs.rollout_logprobs,
            inputs.advantages,
            inputs.response_mask,
            self.is_cap,
            self.eps_low,
            self.eps_high,
            self.clip,
            self.length_norm,
            self.train_infer_is,
        )
