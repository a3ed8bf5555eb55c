"""The frontier across N from small synthetic waves: each arm's runs per N, the medians, the refusals."""

import pytest
from test_frontier import ramp, write_run

from stable_rl.analysis.frontier_across import main


def waves(root):
    """N = 1: exact collapses at steps 3 and 4 (8e-4, 1.6e-3), minirl at 2 and survives; N = 8: exact+n8 at 1,
    minirl+n8 at 0 and is cut off (3 of 5 steps, no sign)."""
    one, eight = root / "n1", root / "n8"
    write_run(one, "exact-s0", ramp({3: "reward_collapse"}))
    write_run(one, "exact-s1", ramp({4: "kl_spike"}))
    write_run(one, "minirl-s0", ramp({2: "reward_collapse"}))
    write_run(one, "minirl-s1", ramp())
    write_run(eight, "exact+n8-s0", ramp({1: "reward_collapse"}))
    write_run(eight, "minirl+n8-s0", ramp({0: "reward_collapse"}))
    write_run(eight, "minirl+n8-s1", ramp(steps=3))
    return ["--wave", "1", str(one), "--wave", "8", str(eight), "--steps", "5"]


def test_each_arm_gets_its_median_collapse_rate_at_each_n(tmp_path, capsys):
    arms = ["--arm", "control", "exact", "exact+n8", "--arm", "MiniRL", "minirl", "minirl+n8"]
    main(["--out", str(tmp_path / "out"), *waves(tmp_path), *arms, "--arm", "R2", "-", "exact+n8"])
    assert "for 3 arms at N = 1, 8" in capsys.readouterr().out
    assert (tmp_path / "out" / "across.png").read_bytes()[:4] == b"\x89PNG"
    text = (tmp_path / "out" / "across.md").read_text()
    # control: median(8e-4, 1.6e-3) = 1.2e-3 at N = 1, 2e-4 at N = 8; MiniRL: median(4e-4, inf) = inf, and
    # at N = 8 only its collapse at 1e-4 counts (the cut-off seed has no outcome)
    assert "| control | 0.0012 (2) | 0.0002 (1) |" in text
    assert "| MiniRL | inf (2) | 0.0001 (1) |" in text
    assert "| R2 | - | 0.0002 (1) |" in text


def refused(capsys, argv: list[str]) -> str:
    """The error ``main`` exits with (argparse's usage error, on stderr)."""
    with pytest.raises(SystemExit):
        main(argv)
    return capsys.readouterr().err


def test_an_arm_naming_a_variant_the_wave_lacks_is_refused_with_the_variants_there(tmp_path, capsys):
    err = refused(capsys, ["--out", str(tmp_path / "out"), *waves(tmp_path), "--arm", "MiniRL", "minirl", "minirl+n4"])
    assert "arm 'MiniRL': no variant 'minirl+n4' at N = 8 (there: exact+n8, minirl+n8)" in err


def test_an_arm_needs_one_variant_per_wave(tmp_path, capsys):
    err = refused(capsys, ["--out", str(tmp_path / "out"), *waves(tmp_path), "--arm", "MiniRL", "minirl"])
    assert "arm 'MiniRL': 1 variants for 2 waves" in err


def test_a_folder_without_runs_is_named(tmp_path, capsys):
    err = refused(capsys, ["--out", str(tmp_path / "out"), "--wave", "1", str(tmp_path), "--arm", "a", "b"])
    assert "no <variant>-s<seed>/version_0 run folders" in err


def test_a_wave_or_an_arm_given_twice_is_refused(tmp_path, capsys):
    """Taken silently, the second --wave 8 would put its runs in the first one's column."""
    args = ["--out", str(tmp_path / "out"), *waves(tmp_path)]
    err = refused(capsys, [*args, "--wave", "8", str(tmp_path / "n1"), "--arm", "c", "exact", "exact+n8", "exact"])
    assert "--wave N: 8 given twice" in err
    err = refused(capsys, [*args, "--arm", "c", "exact", "exact+n8", "--arm", "c", "minirl", "minirl+n8"])
    assert "--arm NAME: c given twice" in err


def test_a_wave_whose_runs_were_all_cut_off_has_no_median(tmp_path, capsys):
    write_run(tmp_path / "n2", "minirl+n2-s0", ramp(steps=3))  # 3 of 5 steps, no sign
    args = ["--out", str(tmp_path / "out"), *waves(tmp_path), "--wave", "2", str(tmp_path / "n2")]
    main([*args, "--arm", "MiniRL", "minirl", "minirl+n8", "minirl+n2"])
    assert "| MiniRL | inf (2) | 0.0001 (1) | none (0) |" in (tmp_path / "out" / "across.md").read_text()


@pytest.mark.parametrize("wave", [["0", "logs"], ["two", "logs"]])
def test_n_must_be_a_positive_whole_number(tmp_path, capsys, wave):
    err = refused(capsys, ["--out", str(tmp_path / "out"), "--wave", *wave, "--arm", "a", "b"])
    assert "N is the updates per rollout, a whole number >= 1" in err
