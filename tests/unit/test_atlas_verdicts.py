"""The atlas's verdicts (experiments/atlas: endpoints.py, findings.py, verdicts.py; PROTOCOL.md Part 2) on made-up
logs whose collapse times and held-out values are chosen: endpoints in updates, the cell table, the tests with
Holm and the fixed sequence, and the findings' lines."""

import csv
import importlib.util
import io
import math
import tarfile
from pathlib import Path

import pytest

from experiments.atlas import endpoints, findings, plan
from experiments.atlas.endpoints import CellResult, Run
from experiments.atlas.verdicts import levels_line, seeds_rule
from stable_rl.analysis.heldout_pairs import avg_at
from stable_rl.analysis.run_logs import read_archive
from stable_rl.analysis.survival import Survival

ROOT = Path(__file__).parents[2]
spec = importlib.util.spec_from_file_location("atlas_analysis", ROOT / "experiments/atlas/analysis.py")
analysis = importlib.util.module_from_spec(spec)
spec.loader.exec_module(analysis)
OFF = "experiments/atlas/recipes/offpolicy"
NO_IS, LENGTH_NORM = ("minirl_no_is",), ("minirl_length_norm",)
POWER1, POWER2 = "power 0.81 against a 2x ratio at n = 4", "power 0.70 against a 2x ratio at n = 4, Holm's halved level"
POWER = {1: POWER1, 2: POWER2}  # by Holm family size (PROTOCOL Part 2c)


def metrics_rows(rows: int, drop_at: int | None = None) -> list[dict[str, str]]:
    """metrics.csv: reward 0.5 (0 from row ``drop_at``), entropy 0.5, no update skipped, ``rows`` rows."""
    return [
        {
            "step": str(s),
            "train/reward": "0.0" if drop_at is not None and s >= drop_at else "0.5",
            "train/entropy": "0.5",
            "train/skipped_updates": "0",
        }
        for s in range(rows)
    ]


def outcome_rows(steps, final: int, problems: int = 40) -> list[dict[str, str]]:
    """heldout_outcomes.csv: every problem 0 of 4 correct at step 0, ``final`` of 4 at every later validation."""
    return [
        {"step": str(t), "eval_set": "heldout", "problem": str(p), "correct": str(final if t else 0), "samples": "4"}
        for t in steps
        for p in range(problems)
    ]


def pack(path: Path, runs: dict[str, tuple[list, list]]) -> Path:
    """A .tar.xz laid out as pack_logs.sh packs it: ./<run>/version_0/{metrics,heldout_outcomes}.csv."""
    with tarfile.open(path, "w:xz") as tar:
        for name, logs in runs.items():
            for file, rows in zip(("metrics.csv", "heldout_outcomes.csv"), logs, strict=True):
                text = io.StringIO()
                writer = csv.DictWriter(text, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
                data = text.getvalue().encode()
                info = tarfile.TarInfo(f"./{name}/version_0/{file}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def on_policy(drop_at=None, final=2, rows=900):
    return metrics_rows(rows, drop_at), outcome_rows(range(0, rows + 1, 100), final)


def test_endpoints_are_read_in_updates_with_windows_of_ceil_20_over_n_rows(tmp_path):
    """On-policy: reward 0 from step 300, the 20-row mean halves at 310. N = 16: a row is 16 updates and the window
    2 rows; reward 0 from row 20 halves at row 21, update 16 x 22 - 1 = 351 (a 20-row window would read row 30); a
    run that holds is censored at H - 1 = 895. N = 4: a 5-row window halves 3 rows in, row 52: update 211.
    Held-out after H: the validation at 900 (896 at N = 16)."""
    on, n16, n4 = (
        plan.Cell("L0", (), 1),
        plan.Cell("L2", (f"{OFF}/n16.yaml",), 2, 896),
        plan.Cell("L2", (f"{OFF}/n4.yaml",), 1),
    )
    archive = pack(
        tmp_path / "wave.tar.xz",
        {
            on.run_name(100): on_policy(drop_at=300),
            n16.run_name(100): (metrics_rows(56, drop_at=20), outcome_rows(range(0, 897, 64), 3)),
            n16.run_name(101): (metrics_rows(56), outcome_rows([*range(0, 897, 64), 960], 1)),
            n4.run_name(100): (metrics_rows(225, drop_at=50), outcome_rows(range(0, 901, 100), 1)),
        },
    )
    runs = {name: copies[0] for name, copies in endpoints.read_copies([archive], [on, n16, n4]).items()}
    survivals = {name: run.survival for name, run in runs.items()}
    assert survivals == {
        on.run_name(100): Survival(310, True),
        n16.run_name(100): Survival(351, True),
        n16.run_name(101): Survival(895, False),
        n4.run_name(100): Survival(211, True),
    }
    assert runs[on.run_name(100)].survival.sign == "reward" and not any(run.cut for run in runs.values())
    finals = [avg_at(runs[c.run_name(100)].final) for c in (on, n16, n4)]
    assert finals == [0.5, 0.75, 0.25] and avg_at(runs[n16.run_name(101)].final) == 0.25  # not the one at 960


def test_a_cut_run_counts_once_it_was_run_again_and_cut_again(tmp_path):
    """Wave 1: s100 reaches H, s101 is cut at 640 updates, s102 at 500; wave 2: s101 cut again at 700 (censored at
    699, out of the held-out test), s102 reaches H. After wave 1 only s100 is done: 1 of 3."""
    cell = plan.Cell("L0", (), 3)
    first = pack(
        tmp_path / "a.tar.xz",
        {
            cell.run_name(100): on_policy(),
            cell.run_name(101): on_policy(rows=640),
            cell.run_name(102): on_policy(rows=500),
        },
    )
    second = pack(tmp_path / "b.tar.xz", {cell.run_name(101): on_policy(rows=700), cell.run_name(102): on_policy()})
    early = endpoints.cell_result(cell, endpoints.read_copies([first], [cell]))
    assert [run.seed for run in early.runs] == [100] and endpoints.verdict_of(early) == "1 of 3"
    result = endpoints.cell_result(cell, endpoints.read_copies([first, second], [cell]))
    cut = result.runs[1]
    assert [run.seed for run in result.runs] == [100, 101, 102] and [run.cut for run in result.runs] == [0, 1, 0]
    assert cut.survival == Survival(699, False) and cut.final is None
    assert endpoints.cell_row(result) == (
        "| l0_exact+lr3e-4 | L0 | MiniRL | 3 / 3 | 0; 1 cut | > 900 | 0.500 (SD 0.000) | 2 | holds |"
    )


def test_a_run_archived_twice_or_twice_in_one_archive_or_without_its_last_validation_is_refused(tmp_path):
    """Part 2c: a wave's folder packed into two archives would make a cut run count as cut twice; two versions of a
    run in one archive, one silently; an uncut run needs its validation at H."""
    cell = plan.Cell("L0", (), 1)
    name = cell.run_name(100)
    first = pack(tmp_path / "a.tar.xz", {name: on_policy(rows=640)})
    again = pack(tmp_path / "b.tar.xz", {name: on_policy(rows=640)})
    with pytest.raises(ValueError, match="hold the same copy of run l0_exact"):
        endpoints.read_copies([first, again], [cell])
    with pytest.raises(ValueError, match="hold the same copy of run l0_exact"):
        plan.logged_runs([first, again])
    rerun = pack(tmp_path / "c.tar.xz", {name: on_policy(rows=700)})  # run again, cut again: a copy of its own
    assert plan.logged_runs([first, rerun]) == {name: [639, 699]}
    twice = tmp_path / "d.tar.xz"
    with tarfile.open(twice, "w:xz") as tar, tarfile.open(first) as one:
        for version in (0, 1):
            for member in one.getmembers():
                data = one.extractfile(member).read()
                member.name = member.name.replace("version_0", f"version_{version}")
                tar.addfile(member, io.BytesIO(data))
    with pytest.raises(ValueError, match="is in it twice"):
        read_archive(twice)
    metrics, outcomes = on_policy()
    no_last = pack(tmp_path / "e.tar.xz", {name: (metrics, [r for r in outcomes if r["step"] != "900"])})
    with pytest.raises(ValueError, match="no validation after 900 updates"):
        endpoints.read_copies([no_last], [cell])


def test_a_wave_runs_only_into_a_folder_of_its_own(tmp_path, capsys):
    (tmp_path / "w01" / "run").mkdir(parents=True)
    for save_dir in ([], ["--save-dir", str(tmp_path / "w01")]):
        with pytest.raises(SystemExit):
            plan.main(["--seeds", "6", "--next", "1", "--run", *save_dir])
        assert "--run needs --save-dir, a new folder for this wave" in capsys.readouterr().err


def run(seed: int, collapse: int | None = None, final: float = 0.5, horizon: int = 900) -> Run:
    """A seed's endpoints: collapsed at ``collapse`` (else censored at H - 1), held-out 0.1 at step 0 and ``final``
    at 700 and H on each of 40 problems (0.1 -> 0.5 learns: margin 2 sqrt 2 sqrt(0.3 x 0.7 / 40) = 0.205)."""
    survival = Survival(collapse, True, "reward") if collapse else Survival(horizon - 1, False)
    return Run(seed, survival, False, {0: 0.1, 700: final, horizon: final}, dict.fromkeys(range(40), final), {})


def collapsing(times=(150, 200, 250, 300)) -> list[Run]:
    return [run(100 + i, collapse=t) for i, t in enumerate(times)]


def lower(*differences) -> list[Run]:
    """Seeds whose held-out after H is 0.5 less each of ``differences`` (d_s against a default cell's 0.5)."""
    return [run(100 + i, final=0.5 - d) for i, d in enumerate(differences)]


def results_of(special, seeds=4, l_star="L3", l_m="L3") -> dict:
    """Every cell of the plan at ``seeds`` seeds; ``special`` (key -> runs) replaces a cell's runs, the others hold."""
    results = {}
    for cell in plan.cells(seeds, l_star, l_m):
        key = findings.key_of(CellResult(cell, []))
        runs = special[key] if key in special else [run(100 + i, horizon=cell.horizon) for i in range(cell.seeds)]
        results[key] = CellResult(cell, runs)
    return results


def p_three_df(t: float) -> float:
    """The two-sided p of Student's t at 3 degrees of freedom in closed form: 1 - (2 / pi) (theta + sin theta cos
    theta), theta = atan(t / sqrt 3)."""
    theta = math.atan(t / math.sqrt(3))
    return 1 - 2 / math.pi * (theta + math.sin(theta) * math.cos(theta))


# The scenario, n = 4 (quorum 2): w/o IS collapses at L7, L6, L4 (150-300), at 2 of 4 seeds at L5; MiniRL collapses at
# L3: so L* = L_M = L3. At L2 length-norm, GRPO and CISPO are lower than MiniRL by d_s = 0.05-0.08, and N = 4's
# clip + R2 collapses (150-300) where the other off-policy cells hold.
SCENARIO = {
    ("L7", NO_IS): collapsing(),
    ("L6", NO_IS): collapsing(),
    ("L5", NO_IS): [*collapsing((150, 200)), run(102), run(103)],
    ("L4", NO_IS): collapsing(),
    ("L3", ()): collapsing(),
    ("L2", LENGTH_NORM): lower(0.05, 0.06, 0.07, 0.08),
    ("L2", ("grpo",)): lower(0.05, 0.06, 0.07, 0.08),
    ("L2", ("cispo",)): lower(0.05, 0.06, 0.07, 0.08),
    ("L2", ("n4", "r2")): collapsing(),
}


def test_the_core_matrix_decides_l_star_and_l_m():
    assert findings.decided_levels(results_of(SCENARIO)) == ("L3", False, "L3")
    only_l1 = results_of({("L1", NO_IS): collapsing()})
    assert findings.decided_levels(only_l1) == ("L3", True, None)  # L* at L2 or below: L3, reported so
    assert levels_line(("L3", True, None), only_l1).startswith(
        "L* = L3 (reported so: the lowest collapsing level is L2 or below); L_M = none (MiniRL collapses at no level)"
    )
    assert levels_line(("L3", True, None), results_of({})).startswith("L* = L3 (reported so: no core cell collapses)")
    del only_l1["L4", ()]
    assert findings.decided_levels(only_l1) is None


def test_the_tests_of_a_complete_atlas_by_hand():
    """F1 at L7: MiniRL censored at 899 x 4 against collapses at 150, 200, 250, 300: U = -(4/8 + 4/7 + 4/6 + 4/5),
    V = 1/4 + 12/49 + 8/36 + 4/25; the observed split is one of 2 of the C(8, 4) = 70 that part the arms wholly
    (p = 2/70), and of the 16 swaps within seeds only none and all do (2/16). F6 at L3: the same p twice, Holm
    doubles it to 4/70 > 0.05: not detected. F7 at L2 (neither collapses): d_s = 0.05-0.08, mean 0.065, SD
    sqrt(0.0005 / 3), t = 10.07 at 3 degrees of freedom; Holm over GRPO and CISPO doubles the p."""
    _, tests = findings.findings(results_of(SCENARIO), POWER)
    by = {(t.finding, t.level, t.b[1]): t for t in tests}
    z = -(1 / 2 + 4 / 7 + 4 / 6 + 4 / 5) / math.sqrt(1 / 4 + 12 / 49 + 8 / 36 + 4 / 25)
    f1 = by["F1", "L7", NO_IS]
    assert f1.statistic == pytest.approx(z) and f1.p == pytest.approx(2 / 70) and f1.adjusted == f1.p
    assert f1.beside == "within seeds 0.125" and f1.verdict == "reproduced"
    assert by["F1", "L5", NO_IS].p == pytest.approx(30 / 70) and by["F1", "L3", NO_IS].verdict == "reversed"
    assert [(t.p, t.adjusted, t.verdict) for t in tests if t.finding == "F6"] == [
        (pytest.approx(2 / 70), pytest.approx(4 / 70), "not detected")
    ] * 2
    t = 0.065 / (math.sqrt(0.0005 / 3) / 2)
    grpo = by["F7", "L2", ("grpo",)]
    assert grpo.kind == "paired t" and grpo.statistic == pytest.approx(0.065) and grpo.p == pytest.approx(p_three_df(t))
    assert grpo.adjusted == pytest.approx(2 * p_three_df(t)) and grpo.verdict == "reproduced"
    assert grpo.beside == "sign-flip 0.125 (4 seeds)"  # all four d_s positive: 2 of the 16 patterns
    assert by["F7", "L3", ("grpo",)].kind == "log-rank"  # MiniRL collapses at L3
    f4 = by["F4", "L2", ("n4", "r2")]  # R3's held-out against R2's: d_s = 0; the log-rank test beside it
    assert (f4.kind, f4.p, f4.beside) == ("paired t", 1.0, "sign-flip 1 (4 seeds); log-rank p 0.0286, Z = -2.710")
    # clip + R2 sooner than clip, raw 2/70; Holm over 4: 8/70
    r2 = next(t for t in tests if t.finding == "F3 replay" and t.level == "L2" and t.a == ("L2", ("n4", "r2")))
    assert r2.statistic > 0 and r2.adjusted == pytest.approx(8 / 70) and r2.verdict == "not detected"


def test_the_findings_of_a_complete_atlas_read_the_fixed_sequence():
    lines, _ = findings.findings(results_of(SCENARIO), POWER)
    verdicts = [line.split("): ", 1)[1] if "): " in line else line.split(": ", 1)[1] for line in lines]
    assert verdicts == [
        f"reproduced at dial level >= L6; the sequence stops at L5: not detected ({POWER1}); apart, after the gap: "
        "L4 reproduced, L3 reversed",
        "at its first level, L3: reversed; apart, after the gap: L2 reproduced",  # F2: length-norm holds, MiniRL not
        f"at its first level, L3: not detected ({POWER2})",  # F3 clip: N = 4 and 16, a family of two
        "at its first level, L3: not detected (power not computed for a family of 4)",  # F3 replay
        "at its first level, L3: not detected",  # F4, held-out: no power against a ratio
        "at L2: reproduced (all three hold: yes; intervals inside +-0.05: yes; plateau 700 -> 900 in each: yes)",
        f"at its first level, L3: not detected ({POWER2})",  # F6 at L_M = L3 and above: Holm's 4/70
        f"at its first level, L3: not detected ({POWER2}); apart, after the gap: L2 reproduced",  # F7
        f"at its first level, L2: not detected ({POWER2})",  # F8: neither arm collapses with rollouts in flight
    ]
    assert lines[0].startswith("- **F1** (paper, on-policy) w/o train-infer IS collapses where MiniRL holds (L7, L6,")


def test_a_finding_reads_not_run_until_every_cell_it_reads_is_complete():
    partial = results_of(SCENARIO)
    partial["L2", ("grpo",)] = CellResult(partial["L2", ("grpo",)].cell, lower(0.05, 0.06, 0.07))
    lines, _ = findings.findings(partial, POWER)
    assert lines[-2].endswith(": not run") and lines[0].endswith("L4 reproduced, L3 reversed")
    no_core = results_of(SCENARIO)
    no_core["L1", NO_IS] = CellResult(no_core["L1", NO_IS].cell, [])
    lines = findings.findings(no_core, POWER)[0]  # L* undecided: every finding but F5 (its cells at L2 are done)
    assert [line.endswith(": not run") for line in lines] == [True] * 5 + [False] + [True] * 2 + [False]  # F5, F8


def test_f5_is_reversed_where_a_pairs_interval_lies_outside_and_f6_without_l_m_reads_its_premise():
    """Cold start a lower by d_s = 0.09, 0.10, 0.11, 0.10: mean 0.1, SD sqrt(0.0002 / 3), t(0.975, 3) = 3.182446:
    [0.087, 0.113], wholly above 0.05."""
    lines, tests = findings.findings(results_of({("L2", ("cold_start_a",)): lower(0.09, 0.10, 0.11, 0.10)}), POWER)
    half = 3.182446 * math.sqrt(0.0002 / 3) / 2
    assert (round(0.1 - half, 3), round(0.1 + half, 3)) == (0.087, 0.113)
    f5 = [t for t in tests if t.finding == "F5"]
    assert f5[0].beside.startswith("95% t-interval [0.087, 0.113]; sign-flip 0.125") and f5[0].verdict == "reversed"
    assert "at L2: reversed (all three hold: yes; intervals inside +-0.05: no;" in lines[5]
    assert lines[6].endswith(
        "premise not reproduced: MiniRL does not collapse up to a 14-nat gap"
    )  # no core cell collapses


def test_f8_reads_the_staleness_cells_holm_over_k_1_and_2_with_the_cost_of_staleness_beside():
    """PROTOCOL Part 3, n = 5: w/o IS collapses at 150-350 with k = 1 and 2 rollouts in flight where MiniRL holds:
    each split parts the arms wholly, p = 2 / C(10, 5) = 2/252, Holm over the 2: 4/252 <= 0.05, reproduced. Beside
    it (Part 2c), for each k against k = 0: MiniRL's held-out (k = 1: d_s = 0.02 at every seed, SD 0, p = 0) and
    w/o IS's survival (the same 2/252: staleness itself makes the uncorrected arm collapse)."""
    special = {("L2", ("k1", "minirl_no_is")): collapsing((150, 200, 250, 300, 350))}
    special["L2", ("k2", "minirl_no_is")] = collapsing((150, 200, 250, 300, 350))
    special["L2", ("k1",)] = lower(-0.02, -0.02, -0.02, -0.02, -0.02)
    lines, tests = findings.findings(results_of(special, seeds=5), POWER)
    assert lines[-1] == (
        "- **F8** (issue 45) MiniRL's weight corrects staleness: more stable than w/o IS with k = 1 and 2 rollouts in "
        "flight (L2): reproduced at dial level >= L2"
    )
    f8 = [t for t in tests if t.finding == "F8"]
    assert [(t.p, t.adjusted, t.verdict) for t in f8] == [
        (pytest.approx(2 / 252), pytest.approx(4 / 252), "reproduced")
    ] * 2
    beside = [t for t in tests if t.finding == "F8 beside"]
    k1, k1_no_is = ("L2", ("k1",)), ("L2", ("k1", *NO_IS))
    assert [(t.a, t.b, t.kind, t.verdict) for t in beside[:2]] == [
        (k1, ("L2", ()), "paired t", "reported"),
        (k1_no_is, ("L2", NO_IS), "log-rank", "reported"),
    ]
    assert beside[0].statistic == pytest.approx(0.02) and beside[0].p == 0.0 and beside[2].statistic == 0.0
    assert beside[1].p == pytest.approx(2 / 252) and len(beside) == 4
    assert endpoints.method_of(results_of({})["L2", ("k2", "minirl_no_is")].cell) == "w/o train-infer IS, k = 2"


def test_f8_is_not_separable_where_w_o_is_collapses_at_k_0_and_not_run_until_the_k_0_cells_are_complete():
    """Part 2c: where w/o IS collapses against the FP8 mismatch alone, the k tests cannot speak of staleness."""
    special = {key: collapsing((150, 200, 250, 300, 350)) for key in (("L2", ("k1", *NO_IS)), ("L2", ("k2", *NO_IS)))}
    special["L2", NO_IS] = collapsing((150, 200, 250, 300, 350))
    lines, tests = findings.findings(results_of(special, seeds=5), POWER)
    assert lines[-1].endswith("(L2): not separable from the FP8 mismatch (w/o IS collapses at k = 0 too)")
    assert {t.verdict for t in tests if t.finding == "F8"} == {"not separable"}
    results = results_of(special, seeds=5)
    results["L2", NO_IS] = CellResult(results["L2", NO_IS].cell, collapsing((150, 200)))
    assert findings.findings(results, POWER)[0][-1].endswith(": not run")


def test_a_tied_cell_holds_and_collapses_on_show_and_neither_in_a_verdict():
    """Part 2c, n = 4: the control with 2 seeds collapsed and 2 holding is shown "holds and collapses", gates no
    "reproduced" (F1 at L7 reads not detected although its log-rank p is 2/70), and counts as collapsing for L_M."""
    tied = [*collapsing((150, 200)), run(102), run(103)]
    results = results_of({**SCENARIO, ("L0", ()): tied})
    control = results["L0", ()]
    assert (control.holds, control.collapses, control.tied) == (False, False, True)
    assert endpoints.verdict_of(control) == "holds and collapses"
    f1 = next(t for t in findings.findings(results, POWER)[1] if t.finding == "F1" and t.level == "L7")
    assert f1.p == pytest.approx(2 / 70) and f1.verdict == "not detected"
    at_l7 = results_of({("L7", ()): tied})
    assert findings.decided_levels(at_l7) == ("L7", False, "L7")


def test_the_tests_table_shows_raw_and_adjusted_p():
    results = results_of(SCENARIO)
    table = findings.tests_table(findings.findings(results, POWER)[1], results)
    assert (
        "| F1 | L7 | MiniRL | w/o train-infer IS | log-rank | Z = -2.710 | 0.0286 | 0.0286 | within seeds 0.125 | "
        "reproduced |" in table
    )
    assert (
        "| F6 | L3 | DPPO-TV | MiniRL | log-rank | Z = -2.710 | 0.0286 | 0.0571 | within seeds 0.125 | not detected |"
        in table
    )


POWER_MD = """| shape | seeds | power against 2x | smallest ratio detected with power >= 0.8 |
|---|---|---|---|
| k = 2 (assumed: fewer than 5 collapses) | 6 | 0.700 |  |
| k = 2 (assumed: fewer than 5 collapses) | 8 | 0.810 | 2x |
| k = 1 (reported beside it) | 6 | 0.400 |  |
| k = 1 (reported beside it) | 8 | 0.500 |  |

Seeds per cell with a verdict: 8 (Part 2's rule; at most 12).
At Holm's halved level (0.025, the families of two) 8 seeds have power 0.655 against 2x.
"""


def test_the_seeds_and_their_power_are_read_from_the_committed_power_table():
    """The first shape's power at n for one comparison, the halved level's for a Holm family of two."""
    assert seeds_rule(POWER_MD) == (
        8,
        {1: "power 0.81 against a 2x ratio at n = 8", 2: "power 0.66 against a 2x ratio at n = 8, Holm's halved level"},
    )
    assert seeds_rule((ROOT / "experiments/atlas/pilot/power.md").read_text()) == (
        10,
        {
            1: "power 0.88 against a 2x ratio at n = 10",
            2: "power 0.80 against a 2x ratio at n = 10, Holm's halved level",
        },
    )
    with pytest.raises(ValueError, match="names no seeds per cell"):
        seeds_rule("")


def test_analysis_writes_nothing_without_atlas_logs_and_the_verdicts_with_them(tmp_path):
    """No logs/atlas/*.tar.xz: nothing written. The control's 4 seeds (s100 collapses at 310; held-out 0.5, 0.5,
    0.75, 0.75 after H: mean 0.625, SD 0.144; 3 hold) and 2 of MiniRL's at L7: every finding reads "not run"."""
    assert analysis.atlas_verdicts(tmp_path) == [] and not any(tmp_path.iterdir())
    (tmp_path / "logs" / "atlas").mkdir(parents=True)
    (tmp_path / "pilot").mkdir()
    (tmp_path / "pilot" / "power.md").write_text(POWER_MD.replace("| 6 |", "| 4 |").replace(": 8 (", ": 4 ("))
    control, l7 = plan.cells(4)[:2]
    logs = {control.run_name(100 + s): on_policy(drop_at=300 if s == 0 else None, final=2 + s // 2) for s in range(4)}
    logs |= {l7.run_name(100 + s): on_policy() for s in range(2)}
    pack(tmp_path / "logs" / "atlas" / "wave01.tar.xz", logs)
    written = analysis.atlas_verdicts(tmp_path)
    assert sorted(p.relative_to(tmp_path / "atlas").as_posix() for p in written) == [
        "atlas.png",
        "cells.md",
        "curves/l0_exact+lr3e-4.png",
        "curves/l7_noise0.3+lr3e-4.png",
        "findings.md",
        "tests.md",
    ]
    cells = (tmp_path / "atlas" / "cells.md").read_text()
    assert "| l0_exact+lr3e-4 | L0 | MiniRL | 4 / 4 | 1 (reward 1) | > 900 | 0.625 (SD 0.144) | 3 | holds |" in cells
    assert "| l7_noise0.3+lr3e-4 | L7 | MiniRL | 2 / 4 | 0 | > 900 | 0.500 (SD 0.000) | 2 | 2 of 4 |" in cells
    assert "| l1_bf16+lr3e-4+minirl_no_is | L1 | w/o train-infer IS | 0 / 4 | — | — | — | — | not run |" in cells
    assert "L* and L_M: not decided (the core matrix has 0 of 14 cells complete)" in cells
    finding_lines = [line for line in (tmp_path / "atlas" / "findings.md").read_text().splitlines() if line[:2] == "- "]
    assert len(finding_lines) == 9 and all(line.endswith(": not run") for line in finding_lines)
