"""docs/long/run_cold_start.sh keeps the newest run's metrics.csv (python3 stubbed out: no model is made)."""

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_cold_start_script_copies_the_newest_runs_log(tmp_path):
    script = tmp_path / "docs/long/run_cold_start.sh"
    script.parent.mkdir(parents=True)
    shutil.copy(ROOT / "docs/long/run_cold_start.sh", script)
    stub = tmp_path / "bin/python3"
    stub.parent.mkdir()
    stub.write_text("#!/bin/sh\n")
    stub.chmod(0o755)
    for version in (2, 9, 10):
        run = tmp_path / f"runs/long/long_cold_start_sft_smollm2_moe/version_{version}"
        run.mkdir(parents=True)
        (run / "metrics.csv").write_text(f"version {version}\n")
    env = os.environ | {"PATH": f"{stub.parent}:{os.environ['PATH']}"}
    subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, check=True)
    assert (tmp_path / "docs/long/cold_start/logs/metrics.csv").read_text() == "version 10\n"
