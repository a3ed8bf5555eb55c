"""The first sign of collapse a run raised, and the report's table of them (``stable_rl.analysis.collapse_signs``)."""

from stable_rl.analysis.collapse_signs import first_sign, signs_table
from stable_rl.analysis.report import report


def test_the_first_sign_is_the_earliest_step_of_any_sign():
    series = {
        "train/reward": [(0, 0.5), (1, 0.4), (2, 0.1), (3, 0.1)],
        "train/instability": [(2, 1.0), (3, 1.0)],  # any sign: not a sign's name
        "train/instability/reward_collapse": [(3, 1.0)],
        "train/instability/entropy_collapse": [(2, 1.0), (3, 1.0)],
    }
    assert first_sign(series) == (2, "entropy_collapse")
    assert first_sign({"train/reward": [(0, 0.5)], "train/instability": [(0, 1.0)]}) is None


def test_the_table_names_each_run_with_a_sign_and_its_last_step():
    runs = {
        "stopped/version_0": {"train/reward": [(0, 0.6), (4, 0.2)], "train/instability/reward_collapse": [(4, 1.0)]},
        "went_on/version_0": {"train/reward": [(0, 0.6), (9, 0.5)], "train/instability/kl_spike": [(5, 1.0)]},
        "calm/version_0": {"train/reward": [(0, 0.6), (9, 0.7)]},
    }
    assert signs_table(runs).splitlines() == [
        "| run | first sign | at step | last step logged |",
        "|---|---|---|---|",
        "| stopped/version_0 | reward_collapse | 4 | 4 |",
        "| went_on/version_0 | kl_spike | 5 | 9 |",
    ]
    assert signs_table({"calm/version_0": runs["calm/version_0"]}) == ""


def test_the_report_has_the_section_only_where_a_sign_was_raised(tmp_path):
    header = "epoch,step,train/reward,train/instability,train/instability/reward_collapse\n"
    for name, rows in (("minirl", "0,0,0.6,,\n0,1,0.2,1.0,1.0\n"), ("calm", "0,0,0.6,,\n0,1,0.6,,\n")):
        (tmp_path / name / "version_0").mkdir(parents=True)
        (tmp_path / name / "version_0" / "metrics.csv").write_text(header + rows)
    report([tmp_path / "minirl" / "version_0", tmp_path / "calm" / "version_0"], tmp_path / "out")
    text = (tmp_path / "out" / "report.md").read_text()
    assert (
        text.split("## Signs of collapse")[1].strip().splitlines()[-1]
        == "| minirl/version_0 | reward_collapse | 1 | 1 |"
    )
    report([tmp_path / "calm" / "version_0"], tmp_path / "calm_only")
    assert "Signs of collapse" not in (tmp_path / "calm_only" / "report.md").read_text()
