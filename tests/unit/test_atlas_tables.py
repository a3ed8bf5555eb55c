"""The atlas's tables are remade from the committed logs, and its readings are what they say (experiments/atlas)."""

import importlib.util
import math
from pathlib import Path

from stable_rl.analysis.survival import Survival, logrank_power, weibull_fit_groups, weibull_shape_lower_bound

ROOT = Path(__file__).parents[2]
spec = importlib.util.spec_from_file_location("atlas_analysis", ROOT / "experiments/atlas/analysis.py")
analysis = importlib.util.module_from_spec(spec)
spec.loader.exec_module(analysis)


def test_the_committed_dial_table_is_remade_from_the_committed_logs():
    runs = analysis.read_runs(ROOT / "experiments/atlas/logs/pilot/dial.tar.xz")
    assert len(runs) == 16 and all(sum(1 for r in rows if r.get("train/kl_k3")) == 50 for rows in runs.values())
    committed = (ROOT / "experiments/atlas/pilot/dial.md").read_text()
    assert committed.endswith(analysis.dial_table(runs))


def test_the_committed_rate_table_is_remade_from_the_committed_control_logs():
    """Wave 1: 12 control runs (3e-4 and 1e-4, seeds 0-5), each cut by max_time at 940-950 updates: H = 900."""
    runs = analysis.read_runs(ROOT / "experiments/atlas/logs/pilot/control.tar.xz")
    updates = sorted(sum(1 for r in rows if r.get("train/reward")) for rows in runs.values())
    assert len(runs) == 12 and updates[0] == 940 and updates[-1] == 950
    committed = (ROOT / "experiments/atlas/pilot/rate.md").read_text()
    assert committed.endswith(analysis.rate_table(runs))
    assert committed.endswith("The rate: 3e-4.\n")


def test_the_committed_power_tables_collapse_times_are_remade_from_the_committed_power_logs():
    """The power wave: 12 runs (MiniRL and w/o train-infer IS at L3 and L7, seeds 0-2), all to H = 900. Its cell table
    and fitted shape come from the logs; the powers (2,000 simulations each, minutes) are remade by analysis.py."""
    runs = analysis.read_runs(ROOT / "experiments/atlas/logs/pilot/power.tar.xz")
    assert len(runs) == 12 and {sum(1 for r in rows if r.get("train/reward")) for rows in runs.values()} == {900}
    committed = (ROOT / "experiments/atlas/pilot/power.md").read_text()
    remade = analysis.power_table(runs, simulations=4)
    table, collapses = remade.split("\n\n")[:2]
    assert f"\n\n{table}\n\n{collapses.split(' Power')[0]} Power" in committed
    shape = remade.split("| shape |")[1].splitlines()[2].split(" | ")[0]  # "| k = ... (lower 80% bound; fitted ...)"
    assert shape.startswith("| k = ") and f"\n{shape} | 6 | " in committed


def test_a_level_reads_the_mean_over_its_runs_of_each_runs_median_over_steps():
    """Run s0: steps 0.1, 0.3, 0.2 (median 0.2); run s1: 0.5, 0.4 (median 0.45): the level reads 0.325. Step-0
    held-out 0.2 and 0.1 (L0) against 0.05 and 0.04 (L7): L7 samples below half of L0's 0.15."""

    def run(values, heldout):
        rows = [{"val/heldout/avg@4": str(heldout), "val/heldout/problems": "8"}]
        return rows + [{k: str(v) for k in analysis.READINGS.values()} for v in values]

    runs = {
        "l0_exact+lr-s0": run([0.1, 0.3, 0.2], 0.2),
        "l0_exact+lr-s1": run([0.5, 0.4], 0.1),
        "l7_noise0.3+lr-s0": run([1.0], 0.05),
        "l7_noise0.3+lr-s1": run([3.0], 0.04),
    }
    l0, l7 = [line for line in analysis.dial_table(runs).splitlines() if line.startswith(("| L0", "| L7"))]
    assert l0.split(" | ")[3:] == ["0.33"] * 4 + ["0.150", "at least half of L0's |"]
    assert l7.split(" | ")[3:] == ["2"] * 4 + ["0.045", "worse: below half of L0's |"]


def control_run(heldout_mid, collapse_at=None, clipped=0.0, updates=1000):
    """A control run's metrics.csv rows: reward 0.5 (0.0 from ``collapse_at``), ``clipped`` of updates clipped,
    held-out 0.16 before training, ``heldout_mid`` after 300 updates and later, over 343 problems."""
    rows = []
    for step in range(updates):
        reward = 0.0 if collapse_at is not None and step >= collapse_at else 0.5
        rows.append(
            {"step": str(step), "train/reward": str(reward), "train/grad_clipped": str(float(step % 10 < clipped * 10))}
        )
    for step in [0, *range(99, updates, 100)]:
        value = 0.16 if step < 299 else heldout_mid
        rows.append({"step": str(step), "val/heldout/avg@4": str(value), "val/heldout/problems": "343"})
    return rows


def test_the_rate_rule_reads_learning_holding_and_rare_clipping_per_seed():
    """3e-4: seeds 0-3 learn and hold, seed 4 collapses (reward 0 from step 500: the 20-step mean falls below half
    its best at step 510), seed 5 clips 20% of updates: 4 of 6 pass. 1e-4: all learn, hold and clip none: 6 of 6,
    the rate. Margin at 0.16 -> 0.30 over 343 problems: 2 sqrt(2) sqrt(0.23 x 0.77 / 343) = 0.064."""
    runs = {f"l0_exact+lr3e-4-s{s}": control_run(0.30) for s in range(4)}
    runs["l0_exact+lr3e-4-s4"] = control_run(0.30, collapse_at=500)
    runs["l0_exact+lr3e-4-s5"] = control_run(0.30, clipped=0.2)
    runs |= {f"l0_exact+lr1e-4-s{s}": control_run(0.30) for s in range(6)}
    table = analysis.rate_table(runs)
    assert "| 3e-4 | 0 | 0.160 | 0.300 | 0.300 | 0.064 | yes | none | 0.0% | yes |" in table
    assert "| 3e-4 | 4 | 0.160 | 0.300 | 0.300 | 0.064 | yes | 510 | 0.0% | no |" in table
    assert "| 3e-4 | 5 | 0.160 | 0.300 | 0.300 | 0.064 | yes | none | 20.0% | no |" in table
    assert "| 3e-4 | all | | | | | | | | 4 of 6 |" in table and "| 1e-4 | all | | | | | | | | 6 of 6 |" in table
    assert table.endswith("The rate: 1e-4.\n")


def test_runs_cut_short_set_the_horizon_to_the_hundreds_every_run_reached():
    runs = {"l0_exact+lr3e-4-s0": control_run(0.30, updates=1000), "l0_exact+lr3e-4-s1": control_run(0.30, updates=757)}
    series = {name: analysis.series_of(rows, name) for name, rows in runs.items()}
    assert analysis.horizon_of(series) == 700
    assert analysis.rate_table(runs).startswith("Horizon H = 700 updates; the rule reads held-out after 200 updates.")


def power_wave(collapses):
    """Made-up power-wave runs: cell name -> per seed, the step its reward drops to 0 (None: it holds), 900 updates."""
    return {
        f"{cell}-s{s}": control_run(0.30, collapse_at=c, updates=900)
        for cell, cs in collapses.items()
        for s, c in enumerate(cs)
    }


def test_the_seeds_rule_reads_the_shapes_lower_bound_from_a_wave_with_five_collapses():
    """L7 w/o IS collapses at 210, 410, 610 (reward 0 from 200, 400, 600: the 20-step mean halves 10 steps later),
    L7 MiniRL at 310 and 510: 5 collapses, so the shape is the lower 80% bound of the shared fit (every group
    censored at 899 otherwise); the power is the least over medians 150, 300, 450, as the survival module gives."""
    cells = {
        "l3_fp8_kv+lr3e-4": [None] * 3,
        "l3_fp8_kv+lr3e-4+minirl_no_is": [None] * 3,
        "l7_noise0.3+lr3e-4": [300, 500, None],
        "l7_noise0.3+lr3e-4+minirl_no_is": [200, 400, 600],
    }
    table = analysis.power_table(power_wave(cells), simulations=20)
    censored = [Survival(899, False)] * 3
    groups = [censored, censored, [Survival(310, True), Survival(510, True), Survival(899, False)]]
    groups.append([Survival(t, True) for t in (210, 410, 610)])
    shape = weibull_shape_lower_bound(groups)
    assert "| l7_noise0.3+lr3e-4+minirl_no_is | 3 | 3 | 210, 410, 610 |" in table
    assert "| l3_fp8_kv+lr3e-4 | 3 | 0 | >899, >899, >899 |" in table
    assert f"k = {shape:.3g} (lower 80% bound; fitted {weibull_fit_groups(groups)[0]:.3g})" in table
    power6 = min(
        logrank_power(shape, m / math.log(2) ** (1 / shape), 2.0, 6, 899, simulations=20, max_splits=10_000, floor=100)
        for m in (150, 300, 450)
    )
    assert f"| 6 | {power6:.3f} |" in table


def test_with_fewer_than_five_collapses_the_rule_assumes_a_shape_of_two():
    table = analysis.power_table(power_wave({"l7_noise0.3+lr3e-4": [300, None, None]}), simulations=20)
    power = min(
        logrank_power(2.0, m / math.log(2) ** 0.5, 2.0, 6, 899, simulations=20, max_splits=10_000, floor=100)
        for m in (150, 300, 450)
    )
    assert f"| k = 2 (assumed: fewer than 5 collapses) | 6 | {power:.3f} |" in table
    assert "| k = 1 (reported beside it) | 6 |" in table
    n = int(table.split("Seeds per cell with a verdict: ")[1].split()[0])
    halved = min(
        logrank_power(2.0, m / math.log(2) ** 0.5, 2.0, n, 899, 20, alpha=0.025, max_splits=10_000, floor=100)
        for m in (150, 300, 450)
    )
    assert f"(Part 2's rule; at most 12).\nAt Holm's halved level (0.025, the families of two) {n} seeds " in table
    assert table.endswith(f"have power {halved:.3f} against 2x.\n")
