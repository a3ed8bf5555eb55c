"""The training reward's least-squares trend (stable_rl.analysis.reward_trend) on hand-worked numbers, and its table in
stable-rl-report."""

import math

import pytest
from test_report import write_run

from stable_rl.analysis.report import report
from stable_rl.analysis.reward_trend import reward_trend


def test_slope_and_standard_error_by_hand():
    """Steps 0-3, rewards 1, 2, 2, 4: mean step 1.5, mean reward 2.25, sum of squared step deviations 5, of
    cross products 4.5: slope 0.9; residuals 0.1, 0.2, -0.7, 0.4, whose squares sum to 0.7 over n - 2 = 2
    degrees of freedom: standard error sqrt(0.35 / 5) = sqrt(0.07)."""
    trend = reward_trend("run", [(0, 1.0), (1, 2.0), (2, 2.0), (3, 4.0)])
    assert trend.steps == 4
    assert trend.slope == pytest.approx(0.9, abs=1e-12)
    assert trend.standard_error == pytest.approx(math.sqrt(0.07), abs=1e-12)
    assert trend.change == pytest.approx(2.7, abs=1e-12)


def test_a_straight_line_has_no_error_and_two_points_no_standard_error():
    exact = reward_trend("run", [(4, 0.5), (8, 0.6), (12, 0.7)])
    assert exact.slope == pytest.approx(0.025, abs=1e-12) and exact.standard_error == pytest.approx(0, abs=1e-12)
    two = reward_trend("run", [(0, 0.5), (1, 0.2)])
    assert two.slope == pytest.approx(-0.3, abs=1e-12) and math.isnan(two.standard_error)
    assert math.isnan(reward_trend("run", [(0, 0.5)]).slope)


def test_gaps_in_the_steps_and_non_finite_rewards():
    """Steps 4, 8, 12 rise 0.1 each: 0.025 a step, a fitted change of 0.2 from step 4 to 12 (not 2 x the slope);
    a NaN reward is left out; one step logged twice (no spread of steps) has no slope."""
    gaps = reward_trend("run", [(4, 0.5), (8, 0.6), (10, math.nan), (12, 0.7)])
    assert gaps.steps == 3 and gaps.change == pytest.approx(0.2, abs=1e-12)
    assert gaps.slope == pytest.approx(0.025, abs=1e-12)
    twice = reward_trend("run", [(3, 0.5), (3, 0.7)])
    assert math.isnan(twice.slope) and math.isnan(twice.standard_error)


def test_the_report_gives_each_runs_trend(tmp_path):
    """Rewards 0.5, 0.7, 0.6 at steps 0-2: slope 0.05, residuals -0.05, 0.1, -0.05 (squares 0.015 over 1 degree of
    freedom): standard error sqrt(0.015 / 2) = 0.0866, slope / SE +0.58; two steps have no standard error, and a
    constant reward a standard error of 0 and no ratio."""
    a = write_run(tmp_path, "minirl", ["0,0,0.5,0.001,\n", "0,1,0.7,0.002,\n", "0,2,0.6,0.001,\n"])
    b = write_run(tmp_path, "no_is", ["0,0,0.5,0.003,\n", "0,1,0.2,0.004,\n"])
    flat = write_run(tmp_path, "flat", ["0,0,0.0,0.001,\n", "0,1,0.0,0.001,\n", "0,2,0.0,0.001,\n"])
    report([a, b, flat], tmp_path / "out")
    text = (tmp_path / "out" / "report.md").read_text()
    assert "| minirl/version_0 | 3 | +0.05 | 0.0866 | +0.1 | +0.58 |" in text
    assert "| no_is/version_0 | 2 | -0.3 | - | -0.3 | - |" in text
    assert "| flat/version_0 | 3 | +0 | 0 | +0 | - |" in text  # no error at all: no ratio (and no crash)
