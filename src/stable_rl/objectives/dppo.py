"""DPPO: a trust region on the divergence between the new and the anchor token distributions, in the binary forms
that need only the sampled token's probability (Qi et al., "Rethinking the Trust Region in LLM Reinforcement
Learning", arXiv 2602.04879):

    p = pi_theta(y_t), q = anchor(y_t)
    binary TV:  D = |p - q|
    binary KL:  D = q log(q/p) + (1 - q) log((1 - q)/(1 - p))
    M_t = 0 if A > 0 and p > q and D > delta, or A < 0 and p < q and D > delta; else 1
    J = E [ sum_t M_t * sg[min(pi_theta(y_t)/mu_old(y_t), C)] * A * log pi_theta(y_t) ]

The anchor is the rollout policy mu_old (the paper's default; ``anchor: old`` takes the recomputed pi_old); delta
0.15 for TV, 0.05 for KL (the paper's Appendix F), C = 20 (its Sec. 5.4; its code uses 10). Group-std-normalised
advantages; the caller divides by the number of responses, as MiniRL's (the paper's verl recipe divides the token
sum by responses x the longest response: a constant factor apart).
"""

import math
from typing import Literal

import torch
from torch import Tensor

from stable_rl.objectives.base import (
    LossInputs,
    LossOutput,
    Objective,
    check_positive_is_cap,
    per_token,
    sequence_count,
)
from stable_rl.objectives.is_corrections import bounded_exp

DEFAULT_DELTA = {"binary_tv": 0.15, "binary_kl": 0.05}


def binary_divergence(logprobs: Tensor, anchor_logprobs: Tensor, divergence: str) -> Tensor:
    """D between the two-outcome distributions (the sampled token, any other) of the policy and the anchor;
    ``logprobs`` and ``anchor_logprobs`` [M, T] (no gradient) -> [M, T]."""
    p, q = logprobs.exp(), anchor_logprobs.exp()
    if divergence == "binary_tv":
        return (p - q).abs()
    not_p, not_q = -torch.expm1(logprobs), -torch.expm1(anchor_logprobs)  # 1 - p, 1 - q without cancellation
    tiny = torch.finfo(p.dtype).tiny
    return q * (anchor_logprobs - logprobs) + not_q * (not_q.clamp(min=tiny).log() - not_p.clamp(min=tiny).log())


def dppo_token_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    rollout_logprobs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    divergence: str = "binary_tv",
    delta: float = 0.15,
    is_cap: float = 20.0,
    anchor: str = "rollout",
) -> LossOutput:
    """Negative of the DPPO summand per token; shapes as in ``LossInputs``."""
    advantages = per_token(advantages)  # [M, 1] or [M, T]
    detached = logprobs.detach()  # [M, T]
    anchor_logprobs = rollout_logprobs if anchor == "rollout" else old_logprobs  # [M, T]
    beyond = binary_divergence(detached, anchor_logprobs, divergence) > delta  # [M, T]
    too_high = (advantages > 0) & (detached > anchor_logprobs) & beyond
    too_low = (advantages < 0) & (detached < anchor_logprobs) & beyond
    keep = ~(too_high | too_low) & response_mask  # [M, T]
    log_is = detached - rollout_logprobs  # [M, T] log pi_theta/mu_old
    is_weight = bounded_exp(log_is.clamp(max=math.log(is_cap)))  # [M, T] min(pi_theta/mu_old, C)
    token_loss = -(keep * is_weight * advantages * logprobs)  # [M, T]
    metrics = {
        "dppo_masked": (~keep & response_mask).float(),
        "dppo_masked_positive": (too_high & response_mask).float(),
        "dppo_masked_negative": (too_low & response_mask).float(),
        "is_weight": is_weight,  # as MiniRL's: the truncated weight applied
        "is_truncated": (log_is > math.log(is_cap)).float(),
    }
    return LossOutput(token_loss, metrics)


class DPPO(Objective):
    """DPPO (arXiv 2602.04879): REINFORCE with a truncated IS weight and the binary-divergence trust-region mask.

    Args:
        divergence: "binary_tv" or "binary_kl".
        delta: the trust region's radius; None: the paper's for the divergence (TV 0.15, KL 0.05).
        is_cap: truncation C of pi_theta/mu_old (the paper: 20).
        anchor: the distribution the divergence is measured from: "rollout" (mu_old, the paper's) or "old" (pi_old).
        std_normalize: divide advantages by the group's reward std.
    """

    def __init__(
        self,
        divergence: Literal["binary_tv", "binary_kl"] = "binary_tv",
        delta: float | None = None,
        is_cap: float = 20.0,
        anchor: Literal["rollout", "old"] = "rollout",
        std_normalize: bool = True,
    ) -> None:
        super().__init__(std_normalize=std_normalize)
        if divergence not in DEFAULT_DELTA:
            raise ValueError(f"DPPO divergence={divergence!r}: use one of {', '.join(DEFAULT_DELTA)}")
        if anchor not in ("rollout", "old"):
            raise ValueError(f"DPPO anchor={anchor!r}: use 'rollout' (mu_old) or 'old' (pi_old)")
        self.delta = DEFAULT_DELTA[divergence] if delta is None else delta
        if not self.delta > 0:
            raise ValueError(f"DPPO delta={self.delta}: the trust region's radius must be > 0")
        check_positive_is_cap(is_cap)
        self.divergence, self.is_cap, self.anchor = divergence, is_cap, anchor

    def normalizer(self, response_mask: Tensor) -> Tensor:
        """The number of responses, as MiniRL's."""
        return sequence_count(response_mask)

    def __call__(self, inputs: LossInputs) -> LossOutput:
        return dppo_token_loss(
            inputs.logprobs,
            inputs.old_logprobs,
            inputs.rollout_logprobs,
            inputs.advantages,
            inputs.response_mask,
            self.divergence,
            self.delta,
            self.is_cap,
            self.anchor,
        )
