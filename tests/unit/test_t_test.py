"""Student's t without scipy (stable_rl.analysis.t_test): table values, closed forms at 1 and 2 degrees of freedom,
the density integrated numerically, and the paired tests on hand-worked differences."""

import math

import pytest

from stable_rl.analysis.t_test import (
    incomplete_beta,
    paired_t_test,
    sign_flip_p,
    t_cdf,
    t_interval,
    t_quantile,
    t_two_sided_p,
)


def tail_by_simpson(t: float, df: int, intervals: int = 4000) -> float:
    """P(|T| >= t) = 1 - 2 * integral from 0 to t of the t density, by Simpson's rule: a route that shares nothing
    with the incomplete beta function."""
    front = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def density(x):
        return front * (1 + x * x / df) ** (-(df + 1) / 2)

    h = t / intervals
    total = density(0) + density(t) + sum((4 if i % 2 else 2) * density(i * h) for i in range(1, intervals))
    return 1 - 2 * total * h / 3


def test_the_table_values_of_nine_degrees_of_freedom():
    """t(0.975, 9) = 2.262 (two-sided 0.05) and t(0.95, 9) = 1.833 (one-sided 0.05), as printed tables give them."""
    assert t_two_sided_p(2.262, 9) == pytest.approx(0.05, abs=2e-5)
    assert 1 - t_cdf(1.833, 9) == pytest.approx(0.05, abs=2e-5)
    assert t_quantile(0.975, 9) == pytest.approx(2.262157, abs=1e-6)
    assert t_quantile(0.05, 9) == pytest.approx(-1.833113, abs=1e-6)


@pytest.mark.parametrize("t", [0.0, 0.3, 1.0, 2.5, 12.0, -4.0])
def test_closed_forms_at_one_and_two_degrees_of_freedom(t):
    """df = 1 is Cauchy: P(T <= t) = 1/2 + atan(t) / pi; df = 2: P(T <= t) = 1/2 + t / (2 sqrt(2 + t^2))."""
    assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-13)
    assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-13)


@pytest.mark.parametrize(("t", "df"), [(0.5, 3), (1.7, 5), (2.9, 7), (3.3, 11), (0.05, 30), (4.0, 60)])
def test_the_tail_is_the_integral_of_the_density(t, df):
    assert t_two_sided_p(t, df) == pytest.approx(tail_by_simpson(t, df), abs=1e-10)


def test_the_incomplete_beta_at_its_ends_and_its_symmetry():
    """I_x(a, b) = 1 - I_(1-x)(b, a); I_x(1, 1) = x; I_x(a, 1) = x^a."""
    assert incomplete_beta(2.5, 0.5, 0.0) == 0.0 and incomplete_beta(2.5, 0.5, 1.0) == 1.0
    assert incomplete_beta(3.0, 7.0, 0.8) == pytest.approx(1 - incomplete_beta(7.0, 3.0, 0.2), abs=1e-14)
    assert incomplete_beta(1.0, 1.0, 0.37) == pytest.approx(0.37, abs=1e-14)
    assert incomplete_beta(4.5, 1.0, 0.6) == pytest.approx(0.6**4.5, abs=1e-14)
    with pytest.raises(ValueError, match="outside"):
        incomplete_beta(1.0, 1.0, 1.5)


def test_a_paired_t_test_by_hand():
    """d = 1, 2, 3: mean 2, SD 1, t = 2 / (1 / sqrt 3) = 3.464 at 2 degrees of freedom, two-sided
    p = 1 - t / sqrt(2 + t^2) = 1 - sqrt(12 / 14) = 0.0742; of the 8 sign patterns only all-plus and all-minus reach
    |mean| 2: sign-flip p = 2/8."""
    test = paired_t_test([1.0, 2.0, 3.0])
    assert test.mean == 2.0 and test.t == pytest.approx(2 * math.sqrt(3))
    assert test.p == pytest.approx(1 - math.sqrt(12 / 14), abs=1e-13)
    assert test.sign_flip_p == 0.25


def test_sign_flips_count_every_pattern_at_least_as_far_from_zero():
    """d = 0.5, -0.1, 0.2 (sum 0.6): the |sums| of the 8 patterns are 0.8, 0.6, 0.4, 0.2, each twice: 4 of 8 reach
    0.6."""
    assert sign_flip_p([0.5, -0.1, 0.2]) == 0.5


def test_no_spread_gives_p_zero_off_zero_and_one_at_zero():
    assert paired_t_test([0.1, 0.1, 0.1]).p == 0.0
    assert paired_t_test([0.0, 0.0]).p == 1.0
    assert math.isnan(paired_t_test([0.3]).p)


def test_the_t_interval_at_two_degrees_of_freedom():
    """t(0.975, 2) = 0.95 sqrt(2 / (1 - 0.95^2)) = 4.3027 (df = 2's closed form inverted): 2 +- 4.3027 / sqrt 3."""
    half = 0.95 * math.sqrt(2 / (1 - 0.95**2)) / math.sqrt(3)
    low, high = t_interval([1.0, 2.0, 3.0])
    assert low == pytest.approx(2 - half, abs=1e-9) and high == pytest.approx(2 + half, abs=1e-9)
