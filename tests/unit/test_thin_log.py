"""A metrics.csv thinned for the atlas's archives (stable_rl.analysis.thin_log, PROTOCOL Part 2c): the collapse
rule's columns and validations whole, the rest every N-th step, timings but time/step left out."""

import os
import subprocess
import sys
from pathlib import Path

from stable_rl.analysis.thin_log import thin_csv

ROOT = Path(__file__).parents[2]

LOG = """epoch,step,time/step,time/update,train/reward,train/kl,val/heldout/avg@4
0,0,,,,,0.25
0,0,1.5,0.7,0.5,0.01,
0,1,1.4,0.6,0.25,0.02,
0,2,1.3,0.5,0.75,0.03,
0,2,,,,,0.5
0,3,1.2,0.4,1.0,0.04,
"""


def test_kept_columns_at_every_row_the_others_every_second_step_and_at_validations():
    assert thin_csv(LOG, ["train/reward"], 2) == (
        "epoch,step,time/step,train/reward,train/kl,val/heldout/avg@4\n"
        "0,0,,,,0.25\n"
        "0,0,1.5,0.5,0.01,\n"
        "0,1,,0.25,,\n"
        "0,2,1.3,0.75,0.03,\n"
        "0,2,,,,0.5\n"
        "0,3,,1.0,,\n"
    )


def test_the_atlas_archives_keep_the_collapse_rules_columns_and_give_the_same_endpoints(tmp_path):
    """pack_logs.sh thins what goes into logs/atlas/: its kept columns are endpoints.SIGNS, and the power wave's
    collapse times and held-out after H read the same from the thinned archive as from the whole one."""
    from experiments.atlas import analysis, endpoints

    script = (ROOT / "experiments/atlas/pack_logs.sh").read_text()
    assert f"--keep {','.join(endpoints.SIGNS)} " in script
    whole = ROOT / "experiments/atlas/logs/pilot/power.tar.xz"
    (tmp_path / "logs" / "atlas").mkdir(parents=True)
    thinned = tmp_path / "logs" / "atlas" / "power.tar.xz"
    env = os.environ | {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT / "src")}
    subprocess.run(["bash", "experiments/atlas/pack_logs.sh", str(whole), str(thinned)], cwd=ROOT, env=env, check=True)
    assert thinned.stat().st_size < whole.stat().st_size / 5
    runs = {path: analysis.read_runs(path) for path in (whole, thinned)}
    cells = {path: analysis.cells_of(r, 900) for path, r in runs.items()}
    assert cells[whole] == cells[thinned] and sum(s.collapsed for c in cells[whole].values() for s in c) == 6
    held = {
        p: {n: [r["val/heldout/avg@4"] for r in rows if r.get("val/heldout/avg@4")] for n, rows in rs.items()}
        for p, rs in runs.items()
    }
    assert held[whole] == held[thinned] and len(held[whole]) == 12
