"""IcePop: PPO's clipped surrogate with each token's training-inference ratio kept inside [alpha, beta] and the
token masked outside it (Ling Team, "Every Step Evolves: Scaling Reinforcement Learning for Trillion-Scale
Thinking Model", arXiv 2510.18855, the IcePop objective):

    J = (1 / sum_i |y_i|) sum_i sum_t M(k_t) * min(r_t A_i, clip(r_t, 1 - eps_low, 1 + eps_high) A_i)
    k_t = pi_old(y_t)/mu_old(y_t),  M(k) = k if alpha <= k <= beta else 0,  r_t = pi_theta/pi_old

M(k_t) carries no gradient; alpha 0.5, beta 5 (verl's IcePop preset, the published write-up); group-std-normalised
advantages, as GRPO's; the caller divides by the number of response tokens (a masked token stays in it).
"""

from torch import Tensor

from stable_rl.objectives.base import LossInputs, LossOutput, Objective, check_clip_range, token_count
from stable_rl.objectives.grpo import clipped_surrogate_loss
from stable_rl.objectives.is_corrections import bounded_exp, check_bounds, within


def icepop_token_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    rollout_logprobs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    alpha: float = 0.5,
    beta: float = 5.0,
    eps_low: float = 0.2,
    eps_high: float = 0.27,
) -> LossOutput:
    """Negative of the IcePop summand per token; shapes as in ``LossInputs``."""
    log_ratio = old_logprobs - rollout_logprobs  # [M, T] log k_t
    kept = within(log_ratio, alpha, beta)  # [M, T]
    weight = bounded_exp(log_ratio) * kept  # [M, T] M(k_t), no gradient
    out = clipped_surrogate_loss(logprobs, old_logprobs, advantages, response_mask, eps_low, eps_high)
    metrics = out.token_metrics | {
        "icepop_masked": (~kept & response_mask).float(),
        "is_weight": bounded_exp(log_ratio),
    }
    return LossOutput(out.token_loss * weight, metrics)


class IcePop(Objective):
    """IcePop (arXiv 2510.18855): the clipped surrogate times M(pi_old/mu_old), the mask of a band [alpha, beta].

    Args:
        alpha: lower bound of the kept training-inference ratio (0.5).
        beta: upper bound (5.0).
        eps_low: lower clipping bound on pi_theta/pi_old.
        eps_high: upper clipping bound on pi_theta/pi_old.
        std_normalize: divide advantages by the group's reward std (GRPO's advantages).
    """

    def __init__(
        self,
        alpha: float = 0.5,
        beta: float = 5.0,
        eps_low: float = 0.2,
        eps_high: float = 0.27,
        std_normalize: bool = True,
    ) -> None:
        super().__init__(std_normalize=std_normalize)
        check_bounds("IcePop", alpha, beta, ("alpha", "beta"))
        check_clip_range(eps_low, eps_high)
        self.alpha, self.beta, self.eps_low, self.eps_high = alpha, beta, eps_low, eps_high

    def normalizer(self, response_mask: Tensor) -> Tensor:
        """The number of response tokens (1 / sum_i |y_i|)."""
        return token_count(response_mask)

    def __call__(self, inputs: LossInputs) -> LossOutput:
        return icepop_token_loss(
            inputs.logprobs,
            inputs.old_logprobs,
            inputs.rollout_logprobs,
            inputs.advantages,
            inputs.response_mask,
            self.alpha,
            self.beta,
            self.eps_low,
            self.eps_high,
        )
