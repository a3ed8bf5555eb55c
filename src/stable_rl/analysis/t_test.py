"""The paired tests of the stability atlas's held-out endpoint (``experiments/atlas/PROTOCOL.md`` Part 2, "Tests"):
the two-sided paired t-test of the mean of per-seed differences d_s (n - 1 degrees of freedom), the exact sign-flip
test reported beside it, and the t-interval of F5.

Without scipy: Student's t CDF through the regularized incomplete beta function, P(|T| >= t) = I_x(df / 2, 1 / 2)
at x = df / (df + t^2), evaluated by its continued fraction (modified Lentz; Numerical Recipes, 2nd ed., 6.4).
"""

import math
import statistics
from dataclasses import dataclass

import numpy as np

TINY = 1e-300  # keeps the continued fraction's denominators off zero (Lentz)


def incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function, for a, b > 0 and 0 <= x <= 1."""
    if not 0 <= x <= 1:
        raise ValueError(f"x = {x} is outside [0, 1]")
    if x in (0.0, 1.0):
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1) / (a + b + 2):  # the fraction converges fast here; otherwise through I_x(a, b) = 1 - I_1-x(b, a)
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1 - math.exp(log_front) * _beta_fraction(b, a, 1 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction 1 / (1 + d_1 / (1 + d_2 / (1 + ...))) of I_x(a, b), by the modified Lentz method."""
    c, d = 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > TINY else TINY)
    fraction = d
    for m in range(1, 10_000):
        even = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        for term in (even, odd):
            d = 1 + term * d
            d = 1 / (d if abs(d) > TINY else TINY)
            c = 1 + term / c
            c = c if abs(c) > TINY else TINY
            fraction *= d * c
        if abs(d * c - 1) < 1e-15:
            return fraction
    raise ArithmeticError(f"the incomplete beta fraction did not converge at a={a}, b={b}, x={x}")


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    return incomplete_beta(df / 2, 0.5, df / (df + t * t)) if math.isfinite(t) else 0.0


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = t_two_sided_p(t, df) / 2
    return 1 - tail if t > 0 else tail


def t_quantile(q: float, df: float) -> float:
    """The t with P(T <= t) = ``q``, by bisection on ``t_cdf``."""
    low, high = -1.0, 1.0
    while t_cdf(low, df) > q:
        low *= 2
    while t_cdf(high, df) < q:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if t_cdf(middle, df) < q else (low, middle)
    return (low + high) / 2


@dataclass(frozen=True)
class PairedTest:
    mean: float  # the mean of the differences
    t: float
    p: float  # two-sided, n - 1 degrees of freedom; NaN with fewer than 2 differences
    sign_flip_p: float  # the exact sign-flip test's two-sided p, reported beside it


def paired_t_test(differences: list[float]) -> PairedTest:
    """The two-sided paired t-test of the mean of ``differences`` (one per seed), t = mean / (SD / sqrt(n)); with
    no spread, p is 0 (a mean off zero) or 1 (every difference zero)."""
    n = len(differences)
    if n < 2:
        return PairedTest(statistics.fmean(differences) if differences else math.nan, math.nan, math.nan, math.nan)
    mean, spread = statistics.fmean(differences), statistics.stdev(differences)
    t = mean / (spread / math.sqrt(n)) if spread > 0 else math.copysign(math.inf if mean else 0.0, mean)
    return PairedTest(mean, t, t_two_sided_p(t, n - 1), sign_flip_p(differences))


def sign_flip_p(differences: list[float]) -> float:
    """The exact two-sided sign-flip p: the share of the 2^n sign patterns of the differences whose |mean| is at
    least the observed one (the all-plus pattern is the observed one)."""
    d = np.asarray(differences, dtype=float)  # [n]
    patterns = np.arange(2 ** len(d))[:, None] >> np.arange(len(d))[None, :] & 1  # [2^n, n] bits
    means = np.abs((1 - 2 * patterns) @ d) / len(d)  # [2^n]
    return float(np.mean(means >= means[0] - 1e-12))


def t_interval(differences: list[float], level: float = 0.95) -> tuple[float, float]:
    """The two-sided ``level`` t-interval of the mean of ``differences``: mean +- t_q SD / sqrt(n), q = (1 + level) / 2."""
    n = len(differences)
    mean, spread = statistics.fmean(differences), statistics.stdev(differences)
    half = t_quantile((1 + level) / 2, n - 1) * spread / math.sqrt(n)
    return mean - half, mean + half
