"""The frontier's one-command reports: each script's --report remakes its committed table from its committed
logs alone (the arms, the pairs judged and the rule as the docs cite them), in a copy of the folders it reads."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def report(tmp_path: Path, script: str, args: list[str], folder: str) -> subprocess.CompletedProcess:
    scripts = [p.relative_to(ROOT) for d in ("docs/paper/frontier", "docs/long") for p in (ROOT / d).glob("*.sh")]
    for path in [*scripts, Path(folder) / "logs"]:
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if (ROOT / path).is_dir() else shutil.copy)(ROOT / path, target)
    python = tmp_path / "bin" / "python3"  # the scripts call python3: this interpreter, with the package
    python.parent.mkdir()
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    env = os.environ | {"PATH": f"{python.parent}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(["bash", script, *args], cwd=tmp_path, env=env, capture_output=True, text=True)


@pytest.mark.parametrize(
    ("script", "args", "folder"),
    [
        ("docs/paper/frontier/run_n8.sh", ["--report"], "docs/paper/frontier/n8"),
        ("docs/long/run_frontier.sh", ["--report"], "docs/long/frontier"),
        ("docs/long/run_frontier.sh", ["--report", "docs/long/frontier/preview"], "docs/long/frontier/preview"),
    ],
)
def test_a_frontier_report_remakes_its_committed_table(tmp_path, script, args, folder):
    done = report(tmp_path, script, args, folder)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / folder / "frontier.md").read_text() == (ROOT / folder / "frontier.md").read_text()


def test_the_off_policy_script_takes_n_2_4_or_8(tmp_path):
    done = report(tmp_path, "docs/paper/frontier/run_offpolicy.sh", ["3", "--report"], "docs/paper/frontier/n8")
    assert done.returncode == 2 and "N = 2, 4 or 8 (got '3')" in done.stderr
