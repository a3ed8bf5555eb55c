"""The stability frontier from small synthetic CSV logs: each run's collapse, the decision rule, the report."""

import math
from dataclasses import replace

import pytest

from stable_rl.analysis.frontier import Outcome, outcome, separated, verdict
from stable_rl.analysis.report import main

HEADER = (
    "epoch,step,lr-AdamW,train/reward,train/instability,train/instability/reward_collapse,train/instability/kl_spike\n"
)


def write_run(root, name, rows):
    run = root / name / "version_0"
    run.mkdir(parents=True)
    (run / "metrics.csv").write_text(HEADER + "".join(rows))
    return run


def ramp(collapse: dict[int, str] | None = None, steps: int = 5, lr: float = 1e-4) -> list[str]:
    """Rows of a run whose rate doubles every step, raising ``collapse[step]`` = sign at that step."""
    rows = []
    for step in range(steps):
        sign = (collapse or {}).get(step)
        rc, kl = ("1.0" if sign == "reward_collapse" else ""), ("1.0" if sign == "kl_spike" else "")
        rows.append(f"0,{step},{lr * 2**step},0.5,{'1.0' if sign else ''},{rc},{kl}\n")
    return rows


def test_a_collapsed_run_is_read_at_its_first_sign(tmp_path):
    run = write_run(tmp_path, "minirl_no_is-s2", ramp({3: "kl_spike"}, steps=4))
    assert outcome(run, steps=5) == Outcome("minirl_no_is", 2, 3, 8e-4, 3, 8e-4, "kl_spike")


def test_a_survivor_is_above_every_rate_it_reached(tmp_path):
    run = write_run(tmp_path, "onpolicy_fp8+r3-s0", ramp(steps=5))
    got = outcome(run, steps=5)
    assert got == Outcome("onpolicy_fp8+r3", 0, 4, 1.6e-3)
    assert got.frontier_lr == math.inf


def test_a_run_ended_early_without_a_sign_was_cut_off(tmp_path):
    run = write_run(tmp_path, "onpolicy_fp8-s1", ramp(steps=5))
    assert outcome(run, steps=6) == Outcome("onpolicy_fp8", 1, 4, 1.6e-3, cut_off=True)


def test_a_run_without_a_learning_rate_names_the_callback(tmp_path):
    run = tmp_path / "x-s0" / "version_0"
    run.mkdir(parents=True)
    (run / "metrics.csv").write_text("epoch,step,train/reward\n0,0,0.5\n")
    with pytest.raises(ValueError, match=r"add lightning\.pytorch\.callbacks\.LearningRateMonitor"):
        outcome(run)


def fell(lr: float) -> Outcome:
    return Outcome("v", 0, 10, lr, 10, lr, "reward_collapse")


def survived(lr: float) -> Outcome:
    return Outcome("v", 0, 10, lr)


@pytest.mark.parametrize(
    ("unstable", "stable", "expected"),
    [
        ([fell(1), fell(2), fell(3)], [fell(4), fell(5), fell(6)], True),  # medians 2 and 5: 2.5x, apart
        ([fell(1), fell(2), fell(3)], [fell(3.5), fell(3.9), fell(6)], False),  # apart, medians 1.95x
        ([fell(1), fell(2), fell(5)], [fell(4), fell(8), fell(9)], False),  # medians 4x, but 5 > 4
        ([fell(1), fell(2), fell(3)], [fell(4), survived(4), survived(5)], True),  # median of stable: inf
        ([fell(1), survived(2), fell(3)], [survived(9)] * 3, False),  # an unstable survivor: no verdict
        ([fell(1), fell(2), fell(3)], [fell(9), fell(9), Outcome("v", 0, 3, 1.0, cut_off=True)], False),  # cut off
    ],
)
def test_the_decision_rule(unstable, stable, expected):
    assert separated(unstable, stable) is expected


def test_the_tables_verdict_tells_a_cut_off_pair_from_a_separation_that_failed():
    cut = Outcome("v", 0, 3, 1.0, cut_off=True)
    assert verdict([fell(1), fell(2), fell(3)], [fell(4), fell(5), fell(6)]) == "yes"
    assert verdict([fell(1), fell(2), fell(5)], [fell(4), fell(8), fell(9)]) == "no"
    assert verdict([fell(1), fell(2), fell(3)], [fell(9), fell(9), cut]) == "no verdict (a seed cut off)"
    # whatever the cut-off seed would have done: a stable seed below an unstable one, or a stable seed cut
    # off above every collapse of the unstable variant (it collapses, if at all, above 5), medians 2x apart
    assert verdict([fell(1), fell(2), fell(3)], [fell(2.5), fell(9), cut]) == "no"
    assert verdict([fell(1), fell(2), cut], [fell(2), fell(9), fell(9)]) == "no"  # 2 is not below 2
    assert (
        verdict([fell(1), fell(2), cut], [fell(9), fell(9), fell(9)]) == "no verdict (a seed cut off)"
    )  # it may survive
    assert verdict([fell(1), fell(2), fell(3)], [fell(9), fell(9), replace(cut, last_lr=5.0)]) == "yes"
    assert verdict([fell(1), fell(2), replace(cut, last_lr=0.5)], [fell(4), fell(4)]) == "no verdict (a seed cut off)"


def test_a_pair_is_judged_only_with_the_seeds_the_rule_was_stated_for():
    """One seed apart by 3x is a "yes" of the bare rule, but the rule was stated for three seeds: no verdict,
    and the count names the variant with the fewest runs."""
    assert verdict([fell(1)], [fell(3)]) == "yes"
    assert verdict([fell(1)], [fell(3)], seeds=3) == "no verdict (1 of 3 seeds)"
    assert verdict([fell(1), fell(2), fell(3)], [fell(4), fell(9)], seeds=3) == "no verdict (2 of 3 seeds)"
    assert verdict([fell(1), fell(2), fell(3)], [fell(4), fell(5), fell(6)], seeds=3) == "yes"
    assert verdict([fell(1)], [], seeds=3) == "no verdict (0 of 3 seeds)"  # nothing known of the other


def test_seeds_not_apart_already_read_no_before_the_rest_have_run():
    """Every seed must be apart: one stable seed at or below an unstable one (seed 0 of the long task's N = 8:
    clip + R2 fell at 1.1e-5, no clip at 1.6e-5), or an unstable survivor, decides "no" whatever seeds 1 and
    2 do; a cut-off seed is read as favourably as it could end (unstable: collapsing at its last rate)."""
    cut = Outcome("v", 0, 3, 1.0, cut_off=True)
    assert verdict([fell(1.6)], [fell(1.1)], seeds=3) == "no"
    assert verdict([fell(1.6)], [fell(1.6)], seeds=3) == "no"  # not below
    assert verdict([survived(2)], [survived(9)], seeds=3) == "no"  # the unstable variant survived
    assert verdict([replace(cut, last_lr=0.5)], [fell(1.1)], seeds=3) == "no verdict (1 of 3 seeds)"
    assert verdict([replace(cut, last_lr=2.0)], [fell(1.1)], seeds=3) == "no"  # it would collapse above 2
    assert verdict([fell(1)], [replace(cut, last_lr=0.5)], seeds=3) == "no verdict (1 of 3 seeds)"  # may survive


def test_frontier_report_writes_the_figures_and_the_table(tmp_path, capsys):
    runs = [
        write_run(tmp_path, "no_is-s0", ramp({2: "kl_spike"})),
        write_run(tmp_path, "no_is-s1", ramp({1: "reward_collapse"})),
        write_run(tmp_path, "minirl-s0", ramp({4: "reward_collapse"})),
        write_run(tmp_path, "minirl-s1", ramp()),
    ]
    runs.append(write_run(tmp_path, "minirl-s2", ramp(steps=3)))  # cut off at step 2 of 5
    pair = ["--pair", "no_is:minirl"]
    main([*map(str, runs), "--out", str(tmp_path / "out"), "--frontier", "--steps", "5", "--seeds", "2", *pair])
    assert "for 5 runs" in capsys.readouterr().out
    for figure in ("frontier", "aligned"):
        assert (tmp_path / "out" / f"{figure}.png").read_bytes()[:4] == b"\x89PNG"
    text = (tmp_path / "out" / "frontier.md").read_text()
    # no_is: collapses at 4e-4 and 2e-4, median 3e-4; minirl: 1.6e-3 and a survivor (inf): median inf
    assert "| no_is | 2 | s0 2: 0.0004 kl_spike, s1 1: 0.0002 reward_collapse | - | - | 0.0003 |" in text
    assert "| minirl | 3 | s0 4: 0.0016 reward_collapse | s1 4: 0.0016 | s2 2: 0.0004 | inf |" in text
    assert "| no_is | minirl | inf | no verdict (a seed cut off) |" in text  # minirl-s2 was cut off
    # no_is-s0's steps 0, 1 (collapse at 2) and no_is-s1's step 0 had no train/kl_k3 columns: "-"
    assert "| no_is | - | - | - | - |" in text
    main([*map(str, runs), "--out", str(tmp_path / "out"), "--frontier", "--steps", "5", *pair])  # three seeds
    assert "| no_is | minirl | inf | no verdict (2 of 3 seeds) |" in (tmp_path / "out" / "frontier.md").read_text()


def test_a_malformed_pair_is_refused(tmp_path):
    run = write_run(tmp_path, "a-s0", ramp())
    with pytest.raises(SystemExit):
        main([str(run), "--out", str(tmp_path / "out"), "--frontier", "--pair", "no_colon"])
