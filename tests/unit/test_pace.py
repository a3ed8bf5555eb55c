"""Each run's pace (stable_rl.analysis.pace) on hand-worked numbers, and its table in stable-rl-report."""

import math

from stable_rl.analysis.pace import pace_row, pace_table
from stable_rl.analysis.report import report


def test_median_range_and_count_per_phase():
    """time/step 6, 5, 9, 7 (step 0 logs none): sorted 5, 6, 7, 9, median (6 + 7) / 2 = 6.5, range 5-9;
    rollout 3, 2, 4 (a NaN left out): median 3; no update logged: a dash."""
    series = {
        "time/step": [(1, 6.0), (2, 5.0), (3, 9.0), (4, 7.0)],
        "time/rollout": [(0, 3.0), (1, math.nan), (2, 2.0), (3, 4.0)],
    }
    row = pace_row("a/version_0", series)
    assert row == "| a/version_0 | 6.50 (5.00-9.00), n = 4 | 3.00 (2.00-4.00), n = 3 | - |"


def test_a_run_without_phase_times_has_no_row_and_no_runs_no_table():
    assert pace_row("a", {"train/reward": [(0, 0.5)]}) is None
    assert pace_table({"a": {"train/reward": [(0, 0.5)]}}) == ""
    table = pace_table({"a": {"time/update": [(0, 2.0), (1, 4.0)]}, "b": {}})
    assert table.splitlines()[2:] == ["| a | - | - | 3.00 (2.00-4.00), n = 2 |"]


def test_the_report_gives_each_runs_pace(tmp_path):
    """A CSVLogger file whose steps log time/step 10 and 12 and time/update 4, 6 and 5: medians 11 and 5."""
    run = tmp_path / "minirl" / "version_0"
    run.mkdir(parents=True)
    rows = ["epoch,step,train/reward,time/step,time/update\n", "0,0,0.5,,4\n", "0,1,0.6,10,6\n", "0,2,0.7,12,5\n"]
    (run / "metrics.csv").write_text("".join(rows))
    report([run], tmp_path / "out")
    text = (tmp_path / "out" / "report.md").read_text()
    assert "## Pace" in text
    assert "| minirl/version_0 | 11.00 (10.00-12.00), n = 2 | - | 5.00 (4.00-6.00), n = 3 |" in text
