"""Time to collapse, analysed as survival (the stability atlas, ``experiments/atlas/PROTOCOL.md``).

A run collapses at the first step at or after a warm-up where, over a trailing window, the training reward has
fallen below a fraction of its best window so far, or the entropy is below a floor, or where non-finite updates
were skipped several steps in a row; a run that does neither is censored at its last step. Two arms (seeds of two
methods) are compared by the log-rank test under relabellings of the pooled runs: every one where they are few
enough, a seeded random sample otherwise. The power of that test for a planned number of seeds comes from
simulating Weibull times fitted to pilot runs (one shape shared by several arms, a scale each).
"""

import math
from dataclasses import dataclass, field
from itertools import combinations
from statistics import NormalDist

import numpy as np

Series = dict[str, list[tuple[int, float]]]  # metric -> [(step, value)], as ``run_logs.read_run`` returns


@dataclass(frozen=True)
class Survival:
    time: float  # the step of collapse, or the last step observed (censored)
    collapsed: bool
    sign: str = field(default="", compare=False)  # which sign fired: reward, entropy, skipped updates ("" censored)


def trailing_means(points: list[tuple[int, float]], window: int) -> list[tuple[int, float]]:
    """(step, mean of the last ``window`` values up to it) from the ``window``-th point on, in step order."""
    ordered = sorted(points)
    values = [value for _, value in ordered]
    return [(ordered[i][0], sum(values[i + 1 - window : i + 1]) / window) for i in range(window - 1, len(ordered))]


def collapse_time(
    series: Series,
    horizon: int | None = None,
    window: int = 20,
    warmup: int = 100,
    reward_drop: float = 0.5,
    min_entropy: float = 0.02,
    skips_in_a_row: int = 3,
) -> Survival:
    """When the run collapsed (PROTOCOL.md Part 1): the first step t >= ``warmup`` where the ``window``-step mean
    of ``train/reward`` is below (1 - ``reward_drop``) times its best ``window``-step mean up to t, or the
    ``window``-step mean of ``train/entropy`` is below ``min_entropy``, or ``train/skipped_updates`` was positive
    ``skips_in_a_row`` steps in a row; else censored at the last step logged (at most ``horizon``). The signs that
    fired first are named in ``sign``."""
    last = max(step for step, _ in series["train/reward"])
    if horizon is not None:
        last = min(last, horizon)
    signs: list[tuple[int, str]] = []
    best = -math.inf
    for step, mean in trailing_means(series["train/reward"], window):
        best = max(best, mean)
        if warmup <= step <= last and mean < (1 - reward_drop) * best:
            signs.append((step, "reward"))
            break
    signs += [
        (s, "entropy")
        for s, mean in trailing_means(series.get("train/entropy", []), window)
        if warmup <= s <= last and mean < min_entropy
    ][:1]
    in_a_row = 0
    for step, skipped in sorted(series.get("train/skipped_updates", [])):
        in_a_row = in_a_row + 1 if skipped > 0 else 0
        if in_a_row >= skips_in_a_row and warmup <= step <= last:
            signs.append((step, "skipped updates"))
            break
    if not signs:
        return Survival(last, False)
    first = min(step for step, _ in signs)
    return Survival(first, True, ", ".join(sign for step, sign in signs if step == first))


def _logrank_z(times: np.ndarray, events: np.ndarray, in_a: np.ndarray) -> np.ndarray:
    """The standardised log-rank statistic (O - E) / sqrt(V) of arm A for each row of ``in_a`` [P, N] (bool);
    0 where V is 0 (no event with both arms at risk)."""
    event_times = np.unique(times[events])
    at_risk = (times[None, :] >= event_times[:, None]).astype(float)  # [J, N]
    dies = ((times[None, :] == event_times[:, None]) & events[None, :]).astype(float)
    n, d = at_risk.sum(1), dies.sum(1)  # [J]
    a = in_a.astype(float)
    n_a, d_a = a @ at_risk.T, a @ dies.T  # [P, J]
    share = n_a / n
    u = (d_a - d * share).sum(1)
    v = (d * share * (1 - share) * (n - d) / np.maximum(n - 1, 1)).sum(1)
    return np.divide(u, np.sqrt(v), out=np.zeros_like(u), where=v > 0)


def logrank_z(a: list[Survival], b: list[Survival]) -> float:
    """The log-rank statistic of arm ``a`` against ``b``: positive where ``a`` collapses sooner."""
    times, events = _times_events(a + b)
    return float(_logrank_z(times, events, np.arange(len(a) + len(b))[None, :] < len(a))[0])


def logrank_permutation_p(a: list[Survival], b: list[Survival], max_splits: int = 100_000, seed: int = 0) -> float:
    """Two-sided p of the permutation log-rank test: the share of splits of the pooled runs into arms of these sizes
    whose |statistic| is at least the observed one; every one of the C(n_a + n_b, n_a) splits where there are at
    most ``max_splits``, otherwise the observed split and ``max_splits`` - 1 drawn at random (seeded)."""
    runs = a + b
    count = math.comb(len(runs), len(a))
    if count <= max_splits:
        splits = np.zeros((count, len(runs)), dtype=bool)
        for row, members in enumerate(combinations(range(len(runs)), len(a))):
            splits[row, list(members)] = True
    else:
        order = np.random.default_rng(seed).random((max_splits, len(runs))).argsort(1)
        splits = order < len(a)
        splits[0] = np.arange(len(runs)) < len(a)
    return _permutation_p(runs, splits)


def logrank_within_seed_p(a: list[Survival], b: list[Survival]) -> float:
    """Two-sided p of the log-rank test that swaps arms only within a seed (``a[i]`` and ``b[i]`` share seed i):
    the share of the 2^n swaps whose |statistic| is at least the observed one's (PROTOCOL.md Part 2, beside the
    permutation test of the pooled runs)."""
    if len(a) != len(b):
        raise ValueError(f"{len(a)} and {len(b)} runs: a test within seeds needs one run of each arm per seed")
    swapped = (np.arange(2 ** len(a))[:, None] >> np.arange(len(a))[None, :] & 1).astype(bool)  # [2^n, n]
    return _permutation_p(a + b, np.concatenate([~swapped, swapped], axis=1))  # the first row: none swapped


def _permutation_p(runs: list[Survival], splits: np.ndarray) -> float:
    """The share of ``splits`` [P, N] (True: in arm A; row 0 the observed split) whose |log-rank Z| is at least the
    observed one."""
    times, events = _times_events(runs)
    z = np.abs(_logrank_z(times, events, splits))
    return float(np.mean(z >= z[0] - 1e-9))


def median_time(runs: list[Survival]) -> float:
    """The Kaplan-Meier median time to collapse: the first collapse time at which the estimated share of runs not
    yet collapsed is at most 1/2; inf where it stays above (fewer than half the runs seen to collapse)."""
    remaining = 1.0
    for time in sorted({s.time for s in runs if s.collapsed}):
        at_risk = sum(1 for s in runs if s.time >= time)
        remaining *= 1 - sum(1 for s in runs if s.time == time and s.collapsed) / at_risk
        if remaining <= 0.5 + 1e-12:
            return time
    return math.inf


def weibull_fit(runs: list[Survival]) -> tuple[float, float]:
    """(shape k, scale lam) maximising the censored Weibull likelihood of one group (``weibull_fit_groups``)."""
    k, (lam,) = weibull_fit_groups([runs])
    return k, lam


def weibull_fit_groups(groups: list[list[Survival]]) -> tuple[float, list[float]]:
    """(shape k shared by the groups, each group's scale lam_g) maximising the censored Weibull likelihood: sum over
    collapses of log f(t) plus sum over censored runs of log S(t), S(t) = exp(-(t / lam_g)^k). For a given k,
    lam_g^k = sum_g t^k / collapses_g; k by golden section on log k in [log 0.05, log 50]. A group without a
    collapse has no finite scale (inf) and adds nothing to k."""
    profile = weibull_profile(groups)
    low, high = math.log(0.05), math.log(50.0)
    golden = (math.sqrt(5) - 1) / 2
    for _ in range(200):
        x1, x2 = high - golden * (high - low), low + golden * (high - low)
        low, high = (low, x2) if profile(x1) > profile(x2) else (x1, high)
    k = math.exp((low + high) / 2)
    scales = [
        float((np.sum(t**k) / e.sum()) ** (1 / k)) if e.any() else math.inf
        for t, e in (_times_events(g) for g in groups)
    ]
    return k, scales


def weibull_shape_lower_bound(groups: list[list[Survival]], level: float = 0.8) -> float:
    """The lower end of the two-sided ``level`` profile-likelihood interval of the shared shape k: the k below the
    fitted one where 2 (l(k_hat) - l(k)) reaches the chi-square(1) quantile (1.642 at 0.8). A smaller k spreads the
    times to collapse more, so a power computed at it errs towards more seeds."""
    profile = weibull_profile(groups)
    top = math.log(weibull_fit_groups(groups)[0])
    drop = NormalDist().inv_cdf((1 + level) / 2) ** 2 / 2  # chi-square(1) quantile = squared normal one
    low, high = math.log(0.05), top
    if profile(top) - profile(low) < drop:
        return 0.05
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if profile(top) - profile(middle) > drop else (low, middle)
    return math.exp((low + high) / 2)


def _times_events(runs: list[Survival]) -> tuple[np.ndarray, np.ndarray]:
    return np.array([s.time for s in runs], dtype=float), np.array([s.collapsed for s in runs])


def weibull_profile(groups: list[list[Survival]]):
    """log k -> the censored Weibull log-likelihood of ``groups`` at shape k, each group's scale at its optimum."""
    pairs = [_times_events(g) for g in groups]
    if not any(e.any() for _, e in pairs):
        raise ValueError("no run collapsed: a Weibull fit needs at least one collapse")
    if any((t <= 0).any() for t, _ in pairs):
        raise ValueError(f"times to collapse must be positive, got {sorted(np.concatenate([t for t, _ in pairs]))}")
    fitted = [(np.log(t), e) for t, e in pairs if e.any()]

    def profile(log_k: float) -> float:
        k, total = math.exp(log_k), 0.0
        for log_t, e in fitted:
            scaled = np.exp(k * (log_t - log_t.max()))  # t^k / max(t)^k: no overflow
            log_lam_k = k * log_t.max() + math.log(scaled.sum() / e.sum())
            total += e.sum() * (log_k - log_lam_k) + (k - 1) * log_t[e].sum() - e.sum()
        return total

    return profile


def logrank_power(
    shape: float,
    scale: float,
    ratio: float,
    seeds: int,
    horizon: float,
    simulations: int = 500,
    alpha: float = 0.05,
    seed: int = 0,
    max_splits: int = 100_000,
    floor: float = 0.0,
) -> float:
    """The share of ``simulations`` in which the permutation log-rank test at level ``alpha`` tells apart two
    arms of ``seeds`` runs each, one with Weibull(``shape``, ``scale``) times to collapse and one ``ratio`` times
    later (the same shape: every quantile, the median too, ``ratio`` times later), both censored at ``horizon``; a
    time below ``floor`` (a warm-up in which no collapse is read) counts as at ``floor``."""
    rng = np.random.default_rng(seed)
    detected = 0
    for _ in range(simulations):
        early, late = (
            [Survival(min(max(x, floor), horizon), bool(x <= horizon)) for x in lam * rng.weibull(shape, seeds)]
            for lam in (scale, ratio * scale)
        )
        detected += logrank_permutation_p(early, late, max_splits=max_splits, seed=int(rng.integers(2**31))) <= alpha
    return detected / simulations
