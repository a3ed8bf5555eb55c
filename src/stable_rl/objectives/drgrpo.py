"""Dr. GRPO, "GRPO done right" (Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical
Perspective", arXiv 2503.20783): GRPO without its length and difficulty biases.

    J(theta) = 1 / (M * L_max) sum_i sum_t min(r_t A_i, clip(r_t, 1 - eps_low, 1 + eps_high) A_i)

with r_t = pi_theta/pi_old and A_i = R_i - the mean reward of its group: no 1/|y_i| (which lets long
wrong responses off lightly) and no division by the group's reward std. The token sum is divided by a
constant, the M responses times the generation budget L_max, as in the authors' code (the per-response
``masked_sum`` over ``generate_max_length``, then the mean over responses), so the denominator depends
neither on the responses' lengths nor on how a mini-batch is split.
Departs from the paper in the clipping bounds' defaults, those of this package's GRPO (0.2, 0.27); Dr. GRPO
clipped at 0.2 on both sides. Like GRPO, no training-inference IS correction.
"""

from torch import Tensor

from stable_rl.objectives.base import LossInputs, LossOutput, Objective, check_clip_range, sequence_count
from stable_rl.objectives.grpo import clipped_surrogate_loss


class DrGRPO(Objective):
    """Dr. GRPO: the clipped surrogate summed over tokens, over a constant denominator.

    Args:
        max_response_tokens: L_max, the generation budget: the rollout engine's ``max_new_tokens``.
        eps_low: lower clipping bound on pi_theta/pi_old.
        eps_high: upper clipping bound on pi_theta/pi_old.
    """

    def __init__(self, max_response_tokens: int, eps_low: float = 0.2, eps_high: float = 0.27) -> None:
        if max_response_tokens < 1:
            raise ValueError(
                f"DrGRPO max_response_tokens={max_response_tokens}: set it to the engine's max_new_tokens (>= 1)"
            )
        super().__init__(std_normalize=False)
        check_clip_range(eps_low, eps_high)
        self.max_response_tokens = max_response_tokens
        self.eps_low, self.eps_high = eps_low, eps_high

    def normalizer(self, response_mask: Tensor) -> Tensor:
        """M x L_max, whatever the responses' lengths."""
        return sequence_count(response_mask) * self.max_response_tokens

    def __call__(self, inputs: LossInputs) -> LossOutput:
        return clipped_surrogate_loss(
            inputs.logprobs, inputs.old_logprobs, inputs.advantages, inputs.response_mask, self.eps_low, self.eps_high
        )
