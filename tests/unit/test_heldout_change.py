"""The held-out change rule (``stable_rl.analysis.heldout_change``) on hand-worked numbers, and its table in
stable-rl-report."""

import math

import pytest
from test_report import write_run

from stable_rl.analysis.heldout_change import HeldoutChange, heldout_band, heldout_changes
from stable_rl.analysis.report import report


@pytest.mark.parametrize(
    ("first", "last", "verdict"),
    [(0.5, 0.65, "learned"), (0.5, 0.6, "no change"), (0.65, 0.5, "worse"), (0.4, 0.4, "no change")],
)
def test_the_margin_is_two_bounded_standard_errors_over_problems(first, last, verdict):
    change = HeldoutChange("run", "val/heldout/avg@2", 0, first, 64, last, 128)
    p = (first + last) / 2  # 0.575 for the first: 2 sqrt(2 x 0.575 x 0.425 / 128) = 0.12359
    assert change.margin == pytest.approx(2 * math.sqrt(2 * p * (1 - p) / 128), rel=1e-12)
    assert change.verdict == verdict
    if (first, last) == (0.5, 0.65):
        assert change.margin == pytest.approx(0.1235857, abs=1e-7)


def test_only_held_out_rewards_validated_twice_with_their_problem_count_are_judged():
    runs = {
        "a": {
            "val/heldout/avg@2": [(0, 0.5), (8, 0.55), (16, 0.7)],
            "val/heldout/problems": [(0, 105.0), (8, 105.0), (16, 105.0)],
            "val/heldout/pass@2": [(0, 0.6), (16, 0.9)],  # not an avg@n
            "val/other/avg@4": [(0, 0.3), (16, 0.9)],  # no problem count logged
        },
        "b": {"val/heldout/avg@2": [(0, 0.5)], "val/heldout/problems": [(0, 105.0)]},  # validated once
    }
    (change,) = heldout_changes(runs)
    assert (change.run, change.metric, change.first_step, change.last_step) == ("a", "val/heldout/avg@2", 0, 16)
    assert (change.first, change.last, change.problems, change.verdict) == (0.5, 0.7, 105, "learned")


def test_the_report_judges_each_runs_held_out_change(tmp_path):
    header = "epoch,step,train/reward,val/heldout/avg@2,val/heldout/problems\n"
    rows = ["0,0,,0.5,128\n", "0,0,0.4,,\n", "0,8,0.5,,\n", "0,16,,0.65,128\n"]
    run = write_run(tmp_path, "lr2e-6", [])
    (run / "metrics.csv").write_text(header + "".join(rows))
    report([run], tmp_path / "out")
    text = (tmp_path / "out" / "report.md").read_text()
    assert "| lr2e-6/version_0 | val/heldout/avg@2 | 0.5 (0) | 0.65 (16) | +0.15 | 0.124 | 128 | learned |" in text


@pytest.mark.parametrize("value", [0.0, 1.0])
def test_an_unchanged_reward_at_zero_or_one_did_not_learn(value):
    """At p = 0 or 1 the bound's margin is 0: a change of 0 is no change, not "learned"."""
    change = HeldoutChange("run", "val/heldout/avg@2", 0, value, 64, value, 128)
    assert change.margin == 0 and change.verdict == "no change"
    assert HeldoutChange("run", "val/heldout/avg@2", 0, 0.0, 64, 1 / 256, 128).verdict == "no change"


@pytest.mark.parametrize(("first", "last", "problems"), [(0.5, 0.7, 0), (math.nan, 0.7, 128), (0.5, math.nan, 128)])
def test_no_problems_or_a_nan_gets_no_verdict_and_no_error(first, last, problems):
    change = HeldoutChange("run", "val/heldout/avg@2", 0, first, 64, last, problems)
    assert math.isnan(change.margin) and change.verdict == "no verdict"


def test_the_report_names_a_run_validated_once_instead_of_leaving_it_out(tmp_path):
    """A run stopped before its second validation (the float32 control cut off, as seed 0's was on the long
    frontier) has no verdict: the report says so rather than dropping its row unseen."""
    header = "epoch,step,train/reward,val/heldout/avg@2,val/heldout/problems\n"
    learned = write_run(tmp_path / "a", "lr2e-6", [])
    (learned / "metrics.csv").write_text(header + "0,0,,0.5,128\n0,8,0.5,,\n0,16,,0.65,128\n")
    once = write_run(tmp_path / "b", "lr2e-6+exact", [])
    (once / "metrics.csv").write_text(header + "0,0,,0.7,128\n0,8,0.5,,\n")
    report([learned, once], tmp_path / "out")
    text = (tmp_path / "out" / "report.md").read_text()
    assert "| lr2e-6/version_0 | val/heldout/avg@2 |" in text
    assert "No verdict (validated once, or no problem count): lr2e-6+exact/version_0 (val/heldout/avg@2)" in text
    report([once], tmp_path / "out_once")
    assert "lr2e-6+exact/version_0 (val/heldout/avg@2)" in (tmp_path / "out_once" / "report.md").read_text()


def test_the_figures_band_is_two_bounded_standard_errors_where_the_problems_were_counted():
    """0.5 over 100 problems: 2 sqrt(0.25 / 100) = 0.1; 0.75 over 48: 2 sqrt(0.1875 / 48) = 0.125; a validation
    without a finite problem count at that step gets no band (and a last one without it, no verdict)."""
    series = {
        "val/heldout/avg@2": [(0, 0.5), (8, 0.75), (16, 0.6), (24, 0.6)],
        "val/heldout/problems": [(0, 100.0), (8, 48.0), (24, math.nan)],
    }
    band = heldout_band(series, "val/heldout/avg@2")
    assert [step for step, _, _ in band] == [0, 8]  # step 24's count is not finite: no band, no error
    assert heldout_changes({"run": series})[0].verdict == "no verdict"
    for (_, low, high), expected in zip(band, [(0.4, 0.6), (0.625, 0.875)], strict=True):
        assert (low, high) == pytest.approx(expected, abs=1e-12)
