"""CISPO, the paper's appendix baseline (no training-inference IS correction).

    J(theta) = (1 / sum_i |y_i|) sum_i sum_t sg[clip(r_t, 1 - eps_low, 1 + eps_high)] A_i log pi_theta(y_t)

with r_t = pi_theta/pi_old and group-std-normalised advantages; the caller divides the summed
token loss by the number of response tokens in the mini-batch.
"""

import torch
from torch import Tensor

from stable_rl.objectives.base import LossInputs, LossOutput, Objective, check_clip_range, per_token, token_count


def cispo_token_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.27,
) -> LossOutput:
    """Negative of the CISPO summand per token; shapes as in ``LossInputs``."""
    ratio = torch.exp(logprobs.detach() - old_logprobs)  # [M, T]
    weight = ratio.clamp(1 - eps_low, 1 + eps_high)  # [M, T], stop-gradient
    token_loss = -(weight * per_token(advantages) * logprobs * response_mask)  # [M, T]
    return LossOutput(
        token_loss=token_loss,
        token_metrics={"clip_fraction": ((weight != ratio) & response_mask).float()},
    )


class CISPO(Objective):
    """CISPO: clipped IS-weight policy optimisation (the paper's appendix baseline).

    Args:
        eps_low: lower bound of the clipped, stop-gradient weight on pi_theta/pi_old.
        eps_high: upper bound of that weight.
        std_normalize: divide advantages by the group's reward std.
    """

    def __init__(self, eps_low: float = 0.2, eps_high: float = 0.27, std_normalize: bool = True) -> None:
        super().__init__(std_normalize=std_normalize)
        check_clip_range(eps_low, eps_high)
        self.eps_low, self.eps_high = eps_low, eps_high

    def normalizer(self, response_mask: Tensor) -> Tensor:
        """The number of response tokens (CISPO's 1 / sum_i |y_i|)."""
        return token_count(response_mask)

    def __call__(self, inputs: LossInputs) -> LossOutput:
        return cispo_token_loss(
            inputs.logprobs, inputs.old_logprobs, inputs.advantages, inputs.response_mask, self.eps_low, self.eps_high
        )
