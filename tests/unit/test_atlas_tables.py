"""The atlas's tables are remade from the committed logs, and its readings are what they say (experiments/atlas)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).parents[2]
spec = importlib.util.spec_from_file_location("atlas_analysis", ROOT / "experiments/atlas/analysis.py")
analysis = importlib.util.module_from_spec(spec)
spec.loader.exec_module(analysis)


def test_the_committed_dial_table_is_remade_from_the_committed_logs():
    runs = analysis.read_runs(ROOT / "experiments/atlas/logs/pilot/dial.tar.xz")
    assert len(runs) == 16 and all(sum(1 for r in rows if r.get("train/kl_k3")) == 50 for rows in runs.values())
    committed = (ROOT / "experiments/atlas/pilot/dial.md").read_text()
    assert committed.endswith(analysis.dial_table(runs))


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
