"""GSPO: the clipped surrogate on the length-normalised sequence ratio (Zheng et al., "Group Sequence Policy
Optimization", arXiv 2507.18071, Eq. 5):

    J = (1/G) sum_i min(s_i A_i, clip(s_i, 1 - eps_low, 1 + eps_high) A_i),  s_i = (pi_theta(y_i)/pi_old(y_i))^(1/|y_i|)

with group-std-normalised advantages and its own, narrow clip range (3e-4, 4e-4: the paper's Sec. 5.1). GSPO-token
(``token_level``) writes s_{i,t} = sg[s_i] * pi_theta(y_t)/sg[pi_theta(y_t)] and averages the clipped term over
each response's tokens, so that an advantage per token can differ; with one advantage per response its value,
clipping and gradient are GSPO's. The caller divides by the number of responses; each token carries 1/|y_i| of its
response's term.
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
from stable_rl.objectives.grpo import LOG_RATIO_BOUND
from stable_rl.objectives.is_corrections import sequence_log_weight


def gspo_token_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    eps_low: float = 3e-4,
    eps_high: float = 4e-4,
    token_level: bool = False,
) -> LossOutput:
    """Negative of the GSPO (or GSPO-token) term, spread over each response's tokens; shapes as in ``LossInputs``."""
    sequence = sequence_log_weight(logprobs - old_logprobs, response_mask, geometric=True)  # [M, 1] log s_i, with grad
    sequence = sequence.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    if token_level:  # log s_{i,t}: the value of log s_i, the gradient of log pi_theta(y_t) alone
        log_ratio = sequence.detach() + logprobs - logprobs.detach()  # [M, T]
    elif advantages.dim() == 2:
        raise ValueError("GSPO takes one advantage per response; per-token advantages need GSPO(token_level=True)")
    else:
        log_ratio = sequence
    ratio = torch.exp(log_ratio)  # [M, 1] or [M, T]
    advantages = per_token(advantages)
    unclipped = ratio * advantages
    clipped = ratio.clamp(1 - eps_low, 1 + eps_high) * advantages
    surrogate = torch.minimum(unclipped, clipped)  # [M, 1] or [M, T]
    token_loss = -(surrogate * response_mask) / response_lengths(response_mask)  # [M, T]
    clipped_out = (clipped < unclipped).expand_as(response_mask) & response_mask
    sequence_metrics = {
        "seq_ratio": torch.exp(sequence.detach())[:, 0],
        "seq_clip_fraction": clipped_out.any(-1).float(),
    }
    return LossOutput(token_loss, {"clip_fraction": clipped_out.float()}, sequence_metrics)


class GSPO(Objective):
    """GSPO and GSPO-token (arXiv 2507.18071).

    Args:
        eps_low: lower clipping bound on the sequence ratio s_i (the paper: 3e-4).
        eps_high: upper clipping bound (the paper: 4e-4).
        token_level: GSPO-token (per-token advantages allowed).
        std_normalize: divide advantages by the group's reward std (the paper's advantages).
    """

    def __init__(
        self, eps_low: float = 3e-4, eps_high: float = 4e-4, token_level: bool = False, std_normalize: bool = True
    ) -> None:
        super().__init__(std_normalize=std_normalize)
        check_clip_range(eps_low, eps_high)
        self.eps_low, self.eps_high, self.token_level = eps_low, eps_high, token_level

    def normalizer(self, response_mask: Tensor) -> Tensor:
        """The number of responses (1/G, and the mean over prompts)."""
        return sequence_count(response_mask)

    def __call__(self, inputs: LossInputs) -> LossOutput:
        return gspo_token_loss(
            inputs.logprobs,
            inputs.old_logprobs,
            inputs.advantages,
            inputs.response_mask,
            self.eps_low,
            self.eps_high,
            self.token_level,
        )
