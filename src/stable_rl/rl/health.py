"""First-order health of the token-level surrogate (paper Sec. 2): how far each token ratio is from 1.

J_tok approximates J_seq to first order in delta_t, where pi_theta/mu_old = 1 + delta_t. The log of
the ratio splits into a training-inference part and a staleness part,

    log(pi_theta/mu_old) = log(pi_old/mu_old)  +  log(pi_theta/pi_old),

and on a whole response the surrogate stands in for the sequence ratio prod_t (1 + delta_t) by its
linearisation 1 + sum_t delta_t. Pipelined (``data.max_staleness`` = k >= 1), pi_old is k steps newer than the
weights that generated the batch, pi_gen; the training-inference part is then measured at those weights and the
staleness part takes the rest (k steps of updates, then the mini-batches'),

    log(pi_theta/mu_old) = log(pi_gen/mu_old)  +  log(pi_theta/pi_gen),

which is the split above when pi_gen = pi_old (k = 0). These functions measure all of it on one batch, per token or per
response, for ``StepMetrics`` to average and take maxima and quantiles of.
"""

import math

import torch
from torch import Tensor

PARTS = ("train_infer", "staleness", "total")
IS_CAP = 5.0  # MiniRL's truncation C (paper Eq. 7): ``train_infer_beyond_cap`` counts the tokens it would act on


def token_log_ratios(
    logprobs: Tensor, old_logprobs: Tensor, rollout_logprobs: Tensor, generation_logprobs: Tensor | None = None
) -> dict[str, Tensor]:
    """The three log-ratios of every token, [M, T] each: ``train_infer`` log(pi_gen/mu_old), ``staleness``
    log(pi_theta/pi_gen) and their sum ``total`` log(pi_theta/mu_old); pi_gen is pi_old unless
    ``generation_logprobs`` gives it."""
    generation = old_logprobs if generation_logprobs is None else generation_logprobs
    train_infer = generation - rollout_logprobs
    staleness = logprobs.detach() - generation
    return {"train_infer": train_infer, "staleness": staleness, "total": train_infer + staleness}


def sequence_linearisation_gap(total_log_ratio: Tensor, response_mask: Tensor) -> Tensor:
    """|prod_t (1 + delta_t) - (1 + sum_t delta_t)| per response, delta_t = pi_theta/mu_old - 1: the
    error of the surrogate's first-order step on each sequence ratio. [M, T], [M, T] bool -> [M] float64.
    The sequence log-ratio is capped at 50 (a ratio of 5e21) so that one runaway response cannot make
    the batch mean infinite."""
    log_ratio = total_log_ratio.double() * response_mask  # zero off the response
    sequence_ratio = log_ratio.sum(-1).clamp(max=50).exp()
    first_order = 1 + (log_ratio.exp() - 1).mul(response_mask).sum(-1)
    return (sequence_ratio - first_order).abs()


def sequence_train_infer_gap(train_infer_log_ratio: Tensor, response_mask: Tensor) -> Tensor:
    """|sum_t log(pi_old/mu_old)| per response: the log of the sequence-level training-inference IS weight, how far
    the engine's whole response is from the policy's (the atlas's mismatch dial in nats). [M, T], [M, T] bool -> [M]
    float64."""
    return (train_infer_log_ratio.double() * response_mask).sum(-1).abs()


def gradient_share(old_logprobs: Tensor) -> Tensor:
    """1 - pi_old(y_t) per token [M, T]: the size of the token's log-prob gradient with respect to its logits
    (||e_y - p|| lies between 1 - p_y and sqrt(2) (1 - p_y)). A near-deterministic policy's gradient comes from
    its few uncertain tokens, so a mismatch averaged with these weights is the mismatch where the update is."""
    return -torch.expm1(old_logprobs.detach())


def health_metrics(
    logprobs: Tensor,
    old_logprobs: Tensor,
    rollout_logprobs: Tensor,
    response_mask: Tensor,
    threshold: float,
    generation_logprobs: Tensor | None = None,
) -> tuple[dict[str, Tensor], Tensor]:
    """Per-token |log-ratio| of each part, whether the total is beyond ``threshold`` and whether pi_gen/mu_old is
    beyond ``IS_CAP`` or below its inverse ([M, T] each, to be read at ``response_mask``), and the per-response
    linearisation gap [M]. ``generation_logprobs``: log pi_gen (see ``token_log_ratios``)."""
    ratios = token_log_ratios(logprobs, old_logprobs, rollout_logprobs, generation_logprobs)
    tokens = {f"{name}_abs": ratios[name].abs() for name in PARTS}
    tokens["beyond_threshold"] = (ratios["total"].abs() > threshold).float()
    tokens["train_infer_beyond_cap"] = (ratios["train_infer"].abs() > math.log(IS_CAP)).float()
    return tokens, sequence_linearisation_gap(ratios["total"], response_mask)
