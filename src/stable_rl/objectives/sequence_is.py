"""Sequence-level importance sampling: one training-inference weight per response, truncated or masked.

    W_i = prod_t pi_old(y_t)/mu_old(y_t)              (``geometric: false``: pi_old(y|x)/mu_old(y|x))
    W_i = exp(mean_t log pi_old(y_t)/mu_old(y_t))     (``geometric: true``: the length-normalised ratio)
    c_i = min(W_i, cap)                               (``mode: truncate``)
    c_i = W_i * 1(lower <= W_i <= cap)                (``mode: mask``: the response dropped outside)
    J = E [ sum_t M_t * sg[min(pi_theta/pi_old * c_i, C)] * A * log pi_theta(y_t) ]

Liu, Li et al., "When Speed Kills Stability" (2025): Seq-TIS, Seq-MIS and the geometric mean (Geo-RS); TRL's
``sequence_truncate``/``sequence_mask`` (product only) and verl's sequence rollout correction (cap 2.0; Geo-RS
bounds 0.999-1.001) apply them. The staleness factor, M_t and the truncation of the whole weight at C = 5 as in
MiniRL (arXiv 2512.01374, Eq. 7); group-mean advantages, divided by the number of responses (a dropped response
keeps its place in that count).
"""

from typing import Literal

from torch import Tensor

from stable_rl.objectives.base import LossInputs, LossOutput, Objective, check_clip_range, sequence_count
from stable_rl.objectives.is_corrections import (
    bounded_exp,
    check_bounds,
    check_is_cap,
    corrected_reinforce_loss,
    sequence_log_weight,
    within,
)


def sequence_is_token_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    rollout_logprobs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    mode: str = "truncate",
    geometric: bool = False,
    cap: float = 2.0,
    lower: float = 0.0,
    eps_low: float = 0.2,
    eps_high: float = 0.27,
    clip: bool = True,
    is_cap: float = 5.0,
) -> LossOutput:
    """Negative of the sequence-IS summand per token; shapes as in ``LossInputs``."""
    log_weight = sequence_log_weight(old_logprobs - rollout_logprobs, response_mask, geometric)  # [M, 1]
    weight = bounded_exp(log_weight)  # [M, 1]
    if mode == "truncate":
        altered = weight > cap  # [M, 1]
        correction = weight.clamp(max=cap)
    else:
        kept = within(log_weight, lower, cap)
        altered, correction = ~kept, weight * kept
    out = corrected_reinforce_loss(
        logprobs, old_logprobs, correction, advantages, response_mask, eps_low, eps_high, clip, is_cap
    )
    name = "seq_is_truncated" if mode == "truncate" else "seq_is_masked"
    sequence_metrics = {"seq_is_weight": weight[:, 0], name: altered[:, 0].float()}
    return LossOutput(out.token_loss, out.token_metrics, sequence_metrics)


class SequenceIS(Objective):
    """MiniRL with a sequence-level training-inference IS weight in place of the token-level one.

    Args:
        mode: "truncate" (min(W, cap)) or "mask" (W, the response dropped outside [lower, cap]).
        geometric: the geometric-mean (length-normalised) ratio instead of the product.
        cap: truncation point, or the upper bound of the mask (verl's Seq-TIS: 2.0; its Geo-RS: 1.001).
        lower: the mask's lower bound ("mask" only; 0: none; verl's Geo-RS: 0.999).
        eps_low: lower clipping bound on pi_theta/pi_old for negative advantages (MiniRL's 0.2).
        eps_high: upper clipping bound for positive advantages (MiniRL's 0.27).
        clip: apply MiniRL's decoupled clipping mask.
        is_cap: MiniRL's truncation C of the whole weight pi_theta/pi_old * c_i (5); at least ``cap``.
    """

    def __init__(
        self,
        mode: Literal["truncate", "mask"] = "truncate",
        geometric: bool = False,
        cap: float = 2.0,
        lower: float = 0.0,
        eps_low: float = 0.2,
        eps_high: float = 0.27,
        clip: bool = True,
        is_cap: float = 5.0,
    ) -> None:
        super().__init__(std_normalize=False)
        if mode not in ("truncate", "mask"):
            raise ValueError(f"SequenceIS mode={mode!r}: use 'truncate' or 'mask'")
        if mode == "truncate" and lower:
            raise ValueError(f"SequenceIS lower={lower} with mode 'truncate': a lower bound masks; use mode: mask")
        check_bounds("SequenceIS", lower, cap)
        check_is_cap("SequenceIS", cap, is_cap)
        check_clip_range(eps_low, eps_high)
        self.mode, self.geometric, self.cap, self.lower = mode, geometric, cap, lower
        self.eps_low, self.eps_high, self.clip, self.is_cap = eps_low, eps_high, clip, is_cap

    def normalizer(self, response_mask: Tensor) -> Tensor:
        """The number of responses, as MiniRL's."""
        return sequence_count(response_mask)

    def __call__(self, inputs: LossInputs) -> LossOutput:
        return sequence_is_token_loss(
            inputs.logprobs,
            inputs.old_logprobs,
            inputs.rollout_logprobs,
            inputs.advantages,
            inputs.response_mask,
            self.mode,
            self.geometric,
            self.cap,
            self.lower,
            self.eps_low,
            self.eps_high,
            self.clip,
            self.is_cap,
        )
