"""Token-level masked importance sampling (MIS): MiniRL's REINFORCE with the training-inference weight of each
token kept inside its bounds and the token dropped outside them, instead of truncated.

    J = E [ sum_t M_t * sg[min(pi_theta/pi_old * w_t * 1(lower <= w_t <= cap), C)] * A * log pi_theta(y_t) ]
    w_t = pi_old(y_t)/mu_old(y_t)

The masking of Liu, Li et al., "When Speed Kills Stability" (2025, Sec. 4.2.1), as TRL's ``token_mask`` and
verl's token rollout correction apply it (cap 2.0, verl's ``rollout_is_threshold``); the staleness factor, the
decoupled clipping mask M_t and the truncation of the whole weight at C = 5 as in MiniRL (arXiv 2512.01374, Eq. 7);
group-mean advantages, divided by the number of responses. A dropped token keeps its place in that count.
"""

from torch import Tensor

from stable_rl.objectives.base import LossInputs, LossOutput, Objective, check_clip_range, sequence_count
from stable_rl.objectives.is_corrections import (
    bounded_exp,
    check_bounds,
    check_is_cap,
    corrected_reinforce_loss,
    within,
)


def masked_is_token_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    rollout_logprobs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    cap: float = 2.0,
    lower: float = 0.0,
    eps_low: float = 0.2,
    eps_high: float = 0.27,
    clip: bool = True,
    is_cap: float = 5.0,
) -> LossOutput:
    """Negative of the MIS summand per token; shapes as in ``LossInputs``."""
    log_weight = old_logprobs - rollout_logprobs  # [M, T] log pi_old/mu_old
    kept = within(log_weight, lower, cap)  # [M, T]
    weight = bounded_exp(log_weight)  # [M, T]
    out = corrected_reinforce_loss(
        logprobs, old_logprobs, weight * kept, advantages, response_mask, eps_low, eps_high, clip, is_cap
    )
    metrics = out.token_metrics | {"train_infer_weight": weight, "is_masked": (~kept & response_mask).float()}
    return LossOutput(out.token_loss, metrics)


class MaskedIS(Objective):
    """MiniRL with token-level masked IS (MIS) in place of truncated IS.

    Args:
        cap: a token whose pi_old/mu_old exceeds this is dropped (verl's and slime's default: 2.0).
        lower: a token whose pi_old/mu_old is below this is dropped (0: no lower bound; slime's MIS example: 0.5).
        eps_low: lower clipping bound on pi_theta/pi_old for negative advantages (MiniRL's 0.2).
        eps_high: upper clipping bound for positive advantages (MiniRL's 0.27).
        clip: apply MiniRL's decoupled clipping mask.
        is_cap: MiniRL's truncation C of the whole weight pi_theta/pi_old * w_t (5); at least ``cap``.
    """

    def __init__(
        self,
        cap: float = 2.0,
        lower: float = 0.0,
        eps_low: float = 0.2,
        eps_high: float = 0.27,
        clip: bool = True,
        is_cap: float = 5.0,
    ) -> None:
        super().__init__(std_normalize=False)
        check_bounds("MaskedIS", lower, cap)
        check_is_cap("MaskedIS", cap, is_cap)
        check_clip_range(eps_low, eps_high)
        self.cap, self.lower, self.eps_low, self.eps_high, self.clip = cap, lower, eps_low, eps_high, clip
        self.is_cap = is_cap

    def normalizer(self, response_mask: Tensor) -> Tensor:
        """The number of responses, as MiniRL's."""
        return sequence_count(response_mask)

    def __call__(self, inputs: LossInputs) -> LossOutput:
        return masked_is_token_loss(
            inputs.logprobs,
            inputs.old_logprobs,
            inputs.rollout_logprobs,
            inputs.advantages,
            inputs.response_mask,
            self.cap,
            self.lower,
            self.eps_low,
            self.eps_high,
            self.clip,
            self.is_cap,
        )
