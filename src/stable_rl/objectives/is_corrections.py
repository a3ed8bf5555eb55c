"""Training-inference importance weights and the REINFORCE loss they correct (paper Eq. 7's form).

The token ratio pi_theta/mu_old factors into pi_old/mu_old (training-inference discrepancy) times pi_theta/pi_old
(staleness) (arXiv 2512.01374, Sec. 2). MiniRL truncates the product; the corrections here act on the first factor,
w_t = pi_old(y_t)/mu_old(y_t), token by token or for a whole response, truncated (``min(w, C)``) or masked (the
token or response dropped beyond its bounds), and keep the second, sg[pi_theta/pi_old], with MiniRL's decoupled
clipping mask and its truncation of the whole weight at C (5), so that off-policy the staleness cannot grow the
weight without bound and on-policy (pi_theta = pi_old) each is REINFORCE with its weight c_t (<= its cap <= C):

    J = E [ sum_t M_t * sg[min(pi_theta(y_t)/pi_old(y_t) * c_t, C)] * A * log pi_theta(y_t) ]
"""

import math

import torch
from torch import Tensor

from stable_rl.objectives.base import LossOutput, per_token
from stable_rl.objectives.grpo import LOG_RATIO_BOUND
from stable_rl.objectives.minirl import decoupled_clip_mask


def bounded_exp(log_weight: Tensor) -> Tensor:
    """exp of a log-weight clamped to +-``LOG_RATIO_BOUND`` (20 nats: no inf in float32, no inf x 0 = NaN)."""
    return torch.exp(log_weight.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))


def check_bounds(owner: str, lower: float, cap: float, names: tuple[str, str] = ("lower", "cap")) -> None:
    """Refuse bounds that would drop or shrink a token without mismatch (weight 1): ``0 <= lower <= 1 <= cap``."""
    if not (0 <= lower <= 1 <= cap and lower < cap):
        low, high = names
        raise ValueError(
            f"{owner} {low}={lower}, {high}={cap}: the bounds must keep a weight of 1 (no mismatch): "
            f"0 <= {low} <= 1 <= {high}"
        )


def sequence_log_weight(log_weight: Tensor, response_mask: Tensor, geometric: bool) -> Tensor:
    """log of the response's weight from its tokens' log-weights: the sum (the product of token ratios,
    pi_old(y|x)/mu_old(y|x)) or, ``geometric``, the mean over the response (the length-normalised, geometric-mean
    ratio). ``log_weight`` [M, T], ``response_mask`` [M, T] bool -> [M, 1]."""
    total = (log_weight * response_mask).sum(-1, keepdim=True)  # [M, 1]
    if not geometric:
        return total
    return total / response_mask.sum(-1, keepdim=True).clamp(min=1)


def within(log_weight: Tensor, low: float, high: float) -> Tensor:
    """Whether exp(log_weight) lies in [low, high] (``low`` 0: no lower bound), compared in log space."""
    above_low = log_weight >= math.log(low) if low > 0 else torch.ones_like(log_weight, dtype=torch.bool)
    return above_low & (log_weight <= math.log(high))


def check_is_cap(owner: str, cap: float, is_cap: float) -> None:
    """Refuse a truncation of the whole weight below the correction's own cap (it would cut weights the cap keeps)."""
    if is_cap < cap:
        raise ValueError(f"{owner} is_cap={is_cap} < cap={cap}: MiniRL's truncation of the whole weight must be >= cap")


def corrected_reinforce_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    correction: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    eps_low: float,
    eps_high: float,
    clip: bool,
    is_cap: float,
) -> LossOutput:
    """-M_t sg[min(pi_theta/pi_old * c_t, C)] A log pi_theta per token. ``correction`` c: [M, T] or [M, 1], no
    gradient, 0 where a token or response is masked; ``is_cap`` C; other shapes as in ``LossInputs``."""
    advantages = per_token(advantages)  # [M, 1] or [M, T]
    staleness = bounded_exp(logprobs.detach() - old_logprobs)  # [M, T] pi_theta/pi_old
    keep = decoupled_clip_mask(staleness, advantages, eps_low, eps_high) if clip else torch.ones_like(response_mask)
    keep = keep & response_mask  # [M, T]
    weight = staleness * correction  # [M, T]
    token_loss = -(keep * weight.clamp(max=is_cap) * advantages * logprobs)  # [M, T]
    metrics = {"clip_fraction": (~keep & response_mask).float(), "is_truncated": (weight > is_cap).float()}
    return LossOutput(token_loss, metrics)
