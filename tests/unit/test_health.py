"""First-order health metrics on hand-made log-probs (stable_rl.rl.health) and their per-step aggregation."""

import math

import pytest
import torch
from test_module import fixed_batch, policy_and_pi_old, train_on

from stable_rl.metrics import StepMetrics
from stable_rl.rl.health import (
    gradient_share,
    health_metrics,
    sequence_linearisation_gap,
    sequence_train_infer_gap,
    token_log_ratios,
)

LN2 = math.log(2)

pytestmark = pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no `val_dataloader`")


def test_log_ratio_splits_into_train_infer_and_staleness():
    mu = torch.tensor([[0.25, 0.5]]).log()
    old = torch.tensor([[0.5, 0.5]]).log()
    theta = torch.tensor([[0.5, 0.25]]).log()
    ratios = token_log_ratios(theta, old, mu)
    torch.testing.assert_close(ratios["train_infer"], torch.tensor([[LN2, 0.0]]))
    torch.testing.assert_close(ratios["staleness"], torch.tensor([[0.0, -LN2]]))
    torch.testing.assert_close(ratios["total"], torch.tensor([[LN2, -LN2]]))


def test_a_pipelined_batch_splits_at_the_weights_that_generated_it():
    """Powers of two, so every log-ratio is an exact multiple of ln 2: mu_old 1/8 -> pi_gen 1/4 (train_infer ln 2)
    -> pi_old 1/2 -> pi_theta 1/2 (staleness ln 2); the parts add up to the total, token by token."""
    mu = torch.tensor([[0.125, 0.5]]).log()
    generation = torch.tensor([[0.25, 0.5]]).log()
    old = torch.tensor([[0.5, 0.25]]).log()
    theta = torch.tensor([[0.5, 0.5]]).log()
    ratios = token_log_ratios(theta, old, mu, generation)
    torch.testing.assert_close(ratios["train_infer"], torch.tensor([[LN2, 0.0]]))
    torch.testing.assert_close(ratios["staleness"], torch.tensor([[LN2, 0.0]]))
    assert torch.equal(ratios["total"], ratios["train_infer"] + ratios["staleness"])
    torch.testing.assert_close(ratios["total"], torch.tensor([[2 * LN2, 0.0]]))
    assert torch.equal(
        token_log_ratios(theta, old, mu, old)["staleness"], token_log_ratios(theta, old, mu)["staleness"]
    )


def test_sequence_linearisation_gap_by_hand():
    """Ratios 2 and 1/2: the sequence ratio is 1, its first-order form 1 + 1 - 1/2 = 1.5: gap 0.5.
    A single token (the rest padding) is linear: gap 0."""
    log_ratio = torch.tensor([[LN2, -LN2], [math.log(1.1), 5.0]])
    mask = torch.tensor([[True, True], [True, False]])
    torch.testing.assert_close(
        sequence_linearisation_gap(log_ratio, mask), torch.tensor([0.5, 0.0], dtype=torch.float64)
    )


def test_health_metrics_flag_tokens_beyond_the_threshold():
    theta = torch.tensor([[0.5, 0.25, 0.5]]).log()
    old = torch.tensor([[0.5, 0.5, 0.5]]).log()
    mu = torch.tensor([[0.25, 0.5, 0.45]]).log()
    tokens, gaps = health_metrics(theta, old, mu, torch.ones(1, 3, dtype=torch.bool), threshold=0.5)
    assert tokens["beyond_threshold"].tolist() == [[1.0, 1.0, 0.0]]  # |ln 2| > 0.5 > |ln(0.5/0.45)|
    torch.testing.assert_close(tokens["total_abs"], torch.tensor([[LN2, LN2, math.log(0.5 / 0.45)]]))
    expected = abs(2 * 0.5 * (0.5 / 0.45) - (1 + 1 - 0.5 + (0.5 / 0.45 - 1)))
    torch.testing.assert_close(gaps, torch.tensor([expected], dtype=torch.float64))


def test_health_metrics_flag_tokens_beyond_the_is_cap_either_way():
    """pi_old/mu_old = 6 and 1/6 are beyond MiniRL's C = 5 and its inverse; 4.9 and 1/4.9 are not."""
    old = torch.tensor([[0.6, 0.1, 0.49, 0.1]]).log()
    mu = torch.tensor([[0.1, 0.6, 0.1, 0.49]]).log()
    tokens, _ = health_metrics(old, old, mu, torch.ones(1, 4, dtype=torch.bool), threshold=0.5)
    assert tokens["train_infer_beyond_cap"].tolist() == [[1.0, 1.0, 0.0, 0.0]]


def test_sequence_train_infer_gap_sums_each_response_before_the_absolute_value():
    """|ln 2 - ln 3| for the first response (its masked-out 7 counts nothing), |-ln 2 - ln 2| for the second."""
    log_ratio = torch.tensor([[LN2, -math.log(3), 7.0], [-LN2, -LN2, 0.0]])
    mask = torch.tensor([[True, True, False], [True, True, True]])
    torch.testing.assert_close(
        sequence_train_infer_gap(log_ratio, mask), torch.tensor([math.log(1.5), 2 * LN2], dtype=torch.float64)
    )


def test_step_quantile_spans_micro_batches():
    metrics = StepMetrics()
    values = torch.arange(1.0, 101.0)
    metrics.quantile("p99", values[:60], torch.ones(60, dtype=torch.bool), 0.99)
    metrics.quantile("p99", values[60:], torch.ones(40, dtype=torch.bool), 0.99)
    torch.testing.assert_close(metrics.compute()["p99"], torch.tensor(99.01))  # linear interpolation


def test_gradient_share_is_one_minus_the_tokens_probability():
    """||d log p_y / d logits|| = ||e_y - p|| lies in [1 - p_y, sqrt(2) (1 - p_y)]: a certain token (p 1) has none."""
    old = torch.tensor([[0.5, 0.9, 1.0]]).log()
    torch.testing.assert_close(gradient_share(old), torch.tensor([[0.5, 0.1, 0.0]]))


def test_step_weighted_mean_spans_micro_batches_and_skips_the_mask():
    """sum(w x) / sum(w) over the step: (1 * 1 + 3 * 2 + 1 * 4) / (1 + 3 + 1) = 11 / 5; the masked-out 100 and a
    micro-batch of weight 0 count nothing."""
    metrics = StepMetrics()
    metrics.mean("m", torch.tensor([1.0, 2.0, 100.0]), torch.tensor([True, True, False]), torch.tensor([1.0, 3.0, 7.0]))
    metrics.mean("m", torch.tensor([4.0]), weight=torch.tensor([1.0]))
    metrics.mean("m", torch.tensor([50.0]), weight=torch.tensor([0.0]))
    metrics.mean("plain", torch.tensor([1.0, 2.0]))
    metrics.mean("unweighted", torch.tensor([3.0]), weight=torch.tensor([0.0]))
    values = metrics.compute()
    torch.testing.assert_close(values["m"], torch.tensor(11 / 5))
    torch.testing.assert_close(values["plain"], torch.tensor(1.5))
    assert values["unweighted"].isnan()  # no weight at all: no mean


def test_on_policy_step_logs_the_split(tiny_model_path):
    """N = 1: pi_theta = pi_old at the update, so the staleness part is zero and the total is the
    training-inference part, computed here by hand from the policy before the step."""
    batch = fixed_batch(vocab=2048)
    module, old, _ = policy_and_pi_old(tiny_model_path, batch)
    mask = batch.response_mask
    gap = (old - batch.rollout_logprobs)[mask]
    module.health_threshold = float(gap.abs().median())
    logged = train_on(batch, module, steps=1).trainer.callback_metrics
    torch.testing.assert_close(logged["train/health/train_infer_abs"], gap.abs().mean())
    torch.testing.assert_close(logged["train/health/total_abs"], gap.abs().mean())
    assert logged["train/health/staleness_abs"] == 0
    torch.testing.assert_close(
        logged["train/health/train_infer_abs_p99"], torch.quantile(gap.abs().double(), 0.99).float()
    )
    torch.testing.assert_close(
        logged["train/health/beyond_threshold"], (gap.abs() > module.health_threshold).float().mean()
    )
    share = 1 - old[mask].exp()  # each token's gradient share, from the policy before the step
    torch.testing.assert_close(
        logged["train/health/train_infer_abs_by_gradient"], (share * gap.abs()).sum() / share.sum()
    )
    assert logged["train/health/staleness_abs_by_gradient"] == 0
    assert logged["train/health/train_infer_abs_by_gradient"] != logged["train/health/train_infer_abs"]
    assert 0 < logged["train/health/beyond_threshold"] < 1
    per_response = (old - batch.rollout_logprobs).double().mul(mask).sum(-1).abs()[mask.any(-1)]
    for q in (50, 90):
        torch.testing.assert_close(
            logged[f"train/health/seq_train_infer_abs_p{q}"], torch.quantile(per_response, q / 100).float()
        )
    torch.testing.assert_close(logged["train/health/train_infer_beyond_cap"], (gap.abs() > math.log(5)).float().mean())


def test_quantile_beyond_torch_quantiles_limit():
    """torch.quantile refuses more than 2^24 values; a step of a large run has more tokens."""
    from stable_rl.metrics import quantile

    values = torch.arange(2**24 + 1, dtype=torch.float32).flip(0)
    assert quantile(values, 0.5) == 2**23
    torch.testing.assert_close(quantile(torch.arange(1.0, 101.0), 0.99), torch.tensor(99.01))
