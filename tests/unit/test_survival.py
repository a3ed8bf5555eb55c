"""Time to collapse as survival (stable_rl.analysis.survival): the endpoint read from a log, the exact
permutation log-rank test, the censored Weibull fit and the power simulation, on hand-worked cases."""

import math

import numpy as np
import pytest

from stable_rl.analysis.survival import (
    Survival,
    collapse_time,
    logrank_permutation_p,
    logrank_power,
    logrank_within_seed_p,
    logrank_z,
    median_time,
    trailing_means,
    weibull_fit,
    weibull_fit_groups,
    weibull_profile,
    weibull_shape_lower_bound,
)


def log(rewards, entropy=None, skipped=None):
    series = {"train/reward": list(enumerate(rewards))}
    if entropy is not None:
        series["train/entropy"] = list(enumerate(entropy))
    if skipped is not None:
        series["train/skipped_updates"] = list(enumerate(skipped))
    return series


def test_trailing_means_start_at_the_window():
    assert trailing_means([(2, 3.0), (0, 1.0), (1, 2.0), (3, 6.0)], 2) == [(1, 1.5), (2, 2.5), (3, 4.5)]


def test_a_run_collapses_where_its_window_falls_below_half_its_best():
    """Reward 0.8 for 120 steps, then 0.1: the 20-step mean is 0.8 * (20 - m) / 20 + 0.1 * m / 20 after m low
    steps, below 0.4 once 0.7 m > 8, m = 12: step 131 (the 12th low step is step 131)."""
    assert collapse_time(log([0.8] * 120 + [0.1] * 30)) == Survival(131, True)


def test_nothing_before_the_warmup_counts_and_a_run_that_holds_is_censored_at_its_last_step():
    assert collapse_time(log([0.8] * 20 + [0.0] * 40 + [0.8] * 100)) == Survival(159, False)
    assert collapse_time(log([0.8] * 300), horizon=250) == Survival(250, False)


def test_entropy_and_skipped_updates_are_signs_too():
    rewards = [0.5] * 200
    entropy = [0.3] * 150 + [0.01] * 50  # 19 low steps: (0.3 + 19 * 0.01) / 20 = 0.0245; 20: 0.01, at 169
    assert collapse_time(log(rewards, entropy=entropy)) == Survival(169, True)
    skipped = [0] * 200
    skipped[50:53] = [1, 1, 1]  # before the warm-up: not counted
    skipped[110:112] = [1, 1]  # two in a row: not yet
    skipped[140:143] = [1, 1, 1]  # the third in a row at 142
    assert collapse_time(log(rewards, skipped=skipped)) == Survival(142, True)


def test_a_collapse_names_the_sign_that_fired_first():
    """Reward halves at 131 (as above), entropy's 20-step mean falls below 0.02 at 169: the reward sign fires. Reward
    low from 150 halves at 161, entropy low from 142 falls at 161 too: both are named."""
    rewards, entropy = [0.8] * 120 + [0.1] * 80, [0.3] * 150 + [0.01] * 50
    assert collapse_time(log(rewards, entropy=entropy)).sign == "reward"
    assert collapse_time(log([0.5] * 200, entropy=entropy)).sign == "entropy"
    assert collapse_time(log([0.8] * 150 + [0.1] * 50, entropy=[0.3] * 142 + [0.01] * 58)).sign == "reward, entropy"
    assert collapse_time(log([0.5] * 200)).sign == ""


def test_logrank_statistic_by_hand():
    """A collapses at 1 and 2, B at 3 and 4. t=1: 4 at risk, 2 in A, 1 event in A: O - E = 1/2, V = 1/4;
    t=2: 3 at risk, 1 in A: O - E = 2/3, V = 2/9; later A has no one at risk. Z = (7/6) / sqrt(17/36)."""
    a = [Survival(1, True), Survival(2, True)]
    b = [Survival(3, True), Survival(4, True)]
    assert logrank_z(a, b) == pytest.approx((7 / 6) / math.sqrt(17 / 36))
    assert logrank_z(b, a) == pytest.approx(-logrank_z(a, b))
    # of the 6 splits, {1, 2} and {3, 4} reach |Z| = 1.698; the four mixed ones less: p = 2/6
    assert logrank_permutation_p(a, b) == pytest.approx(2 / 6)


def test_censored_runs_leave_the_risk_set_without_an_event():
    """A: collapse at 5, censored at 10; B: censored at 10 twice. Only t=5 counts: 4 at risk, 2 in A:
    O - E = 1 - 1/2, V = (1/2)(1/2)(3)/3 = 1/4, Z = 1. Splits: the collapsed run in A's pair or not, |Z| = 1 in
    all six: p = 1. No collapse at all: Z = 0, p = 1."""
    a = [Survival(5, True), Survival(10, False)]
    b = [Survival(10, False), Survival(10, False)]
    assert logrank_z(a, b) == pytest.approx(1.0)
    assert logrank_permutation_p(a, b) == 1.0
    assert logrank_z(b, b) == 0.0 and logrank_permutation_p(b, b) == 1.0


def test_swapping_arms_within_seeds_only():
    """Seeds pair A's 1, 2, 3 with B's 4, 5, 6: of the 8 swaps only none and all reach the observed |Z| (2/8), where
    the 20 splits of the pooled runs give 2/20; a seed without its pair is an error."""
    a = [Survival(t, True) for t in (1, 2, 3)]
    b = [Survival(t, True) for t in (4, 5, 6)]
    assert logrank_within_seed_p(a, b) == 2 / 8 and logrank_permutation_p(a, b) == pytest.approx(2 / 20)
    assert logrank_within_seed_p(a[:2], b[:2]) == 2 / 4
    with pytest.raises(ValueError, match="one run of each arm per seed"):
        logrank_within_seed_p(a, b[:2])


def test_the_kaplan_meier_median_time_to_collapse():
    """Collapses at 100, 200, 300 of 6 runs (3 censored at 899): 5/6 x 4/5 x 3/4 = 1/2 at 300. Two collapses: never
    at 1/2 (inf). 100, censored at 150, 200, 300: 3/4 after 100, 3/4 x 1/2 = 3/8 at 200."""
    censored = [Survival(899, False)] * 3
    assert median_time([Survival(t, True) for t in (100, 200, 300)] + censored) == 300
    assert median_time([Survival(t, True) for t in (100, 200)] + censored + [Survival(899, False)]) == math.inf
    assert median_time([Survival(100, True), Survival(150, False), Survival(200, True), Survival(300, True)]) == 200


def test_six_against_six_all_apart_gives_the_smallest_exact_p():
    a = [Survival(t, True) for t in range(101, 107)]
    b = [Survival(1000, False)] * 6
    assert logrank_permutation_p(a, b) == pytest.approx(2 / math.comb(12, 6))


def test_above_max_splits_the_p_value_comes_from_random_splits_near_the_exact_one():
    """6 against 6 (924 splits) with max_splits=400: within 3 standard errors of the exact p, and seeded."""
    a = [Survival(t, True) for t in (120, 150, 200, 260, 400, 700)]
    b = [Survival(t, t < 900) for t in (180, 330, 500, 900, 900, 900)]
    exact = logrank_permutation_p(a, b)
    sampled = logrank_permutation_p(a, b, max_splits=400)
    assert 0.01 < exact < 0.9 and abs(sampled - exact) < 3 * math.sqrt(exact * (1 - exact) / 400)
    assert sampled == logrank_permutation_p(a, b, max_splits=400) != logrank_permutation_p(a, b, max_splits=400, seed=1)


def test_weibull_fit_solves_its_score_equation_and_reads_the_exponential_case():
    """At the censored MLE, 1/k + sum_events log t / d - sum t^k log t / sum t^k = 0 (the profile's score),
    lam^k = sum t^k / d; quantile-spaced draws from Weibull(1.5, 300) give back about that."""
    u = (np.arange(400) + 0.5) / 400
    times = 300 * (-np.log(1 - u)) ** (1 / 1.5)
    runs = [Survival(float(min(t, 500)), bool(t <= 500)) for t in times]
    k, lam = weibull_fit(runs)
    t = np.array([r.time for r in runs])
    e = np.array([r.collapsed for r in runs])
    score = 1 / k + np.log(t[e]).sum() / e.sum() - (t**k * np.log(t)).sum() / (t**k).sum()
    assert abs(score) < 1e-6
    assert lam == pytest.approx(((t**k).sum() / e.sum()) ** (1 / k))
    assert k == pytest.approx(1.5, rel=0.05) and lam == pytest.approx(300, rel=0.05)
    with pytest.raises(ValueError, match="no run collapsed"):
        weibull_fit([Survival(10, False)])


def test_a_shared_shape_with_a_scale_per_group_solves_the_pooled_score_equation():
    """Groups drawn from Weibull(1.5, 300) and Weibull(1.5, 600), censored at 500, and a group that never
    collapsed: at the MLE, sum_g d_g / k + sum_events log t - sum_g d_g sum_g t^k log t / sum_g t^k = 0, each
    lam_g^k = sum_g t^k / d_g, and the group without a collapse has no finite scale."""
    u = (np.arange(200) + 0.5) / 200
    groups = [
        [Survival(float(min(t, 500)), bool(t <= 500)) for t in lam * (-np.log(1 - u)) ** (1 / 1.5)]
        for lam in (300, 600)
    ]
    k, scales = weibull_fit_groups([*groups, [Survival(500, False)] * 3])
    score = 0.0
    for g, lam in zip(groups, scales, strict=False):
        t, e = np.array([r.time for r in g]), np.array([r.collapsed for r in g])
        score += e.sum() / k + np.log(t[e]).sum() - e.sum() * (t**k * np.log(t)).sum() / (t**k).sum()
        assert lam == pytest.approx(((t**k).sum() / e.sum()) ** (1 / k))
    assert abs(score) < 1e-5
    assert k == pytest.approx(1.5, rel=0.05) and scales[0] == pytest.approx(300, rel=0.05)
    assert scales[1] == pytest.approx(600, rel=0.08) and scales[2] == math.inf
    assert weibull_fit(groups[0]) == (weibull_fit_groups([groups[0]])[0], weibull_fit_groups([groups[0]])[1][0])


def test_the_shapes_lower_bound_is_where_the_profile_drops_by_half_the_chi_square_quantile():
    """Exponential-like draws (k near 1): at the bound, l(k_hat) - l(k) = 1.6424 / 2 (chi-square(1) at 0.8), and
    the bound lies below k_hat."""
    u = (np.arange(12) + 0.5) / 12
    runs = [Survival(float(t), True) for t in 300 * -np.log(1 - u)]
    k_hat, _ = weibull_fit_groups([runs])
    low = weibull_shape_lower_bound([runs])
    profile = weibull_profile([runs])
    assert low < k_hat and profile(math.log(k_hat)) - profile(math.log(low)) == pytest.approx(1.6424 / 2, abs=1e-3)


def test_a_floor_lifts_early_draws_to_the_warmup():
    """With a scale of 1 every draw is far below the floor of 100: both arms collapse at 100, nothing separates."""
    assert logrank_power(2.0, 1.0, ratio=8.0, seeds=6, horizon=1000, simulations=20, floor=100) == 0.0
    assert logrank_power(2.0, 1.0, ratio=8.0, seeds=6, horizon=1000, simulations=20) == 1.0


def test_power_is_small_without_an_effect_and_near_one_with_a_large_one():
    null = logrank_power(2.0, 300, ratio=1.0, seeds=6, horizon=1000, simulations=200)
    large = logrank_power(2.0, 100, ratio=8.0, seeds=6, horizon=1000, simulations=200)
    assert null <= 0.08  # an exact test at 0.05 (its discreteness makes it conservative)
    assert large >= 0.95
