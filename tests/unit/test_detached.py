"""docs/long/detached.sh: jobs that outlive the shell that started them, and a wait with a time limit."""

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "long" / "detached.sh"


def detached(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "DETACHED_DIR": str(tmp_path)}
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)


def test_a_job_ends_after_its_starter_and_the_wait_reports_it(tmp_path):
    assert detached(tmp_path, "start", "ok", "bash", "-c", "sleep 1; echo one; echo two").returncode == 0
    assert not (tmp_path / "ok.rc").exists()  # the starter returned before the job ended
    done = detached(tmp_path, "wait", "30", "ok")
    assert (done.returncode, done.stdout) == (0, "ok: ended, code 0: two\n")
    assert (tmp_path / "ok.log").read_text() == "one\ntwo\n"


def test_the_wait_names_a_failed_job_and_one_still_running(tmp_path):
    detached(tmp_path, "start", "bad", "bash", "-c", "echo broken; exit 3")
    detached(tmp_path, "start", "slow", "sleep", "5")
    assert detached(tmp_path, "wait", "10", "bad").returncode == 1
    done = detached(tmp_path, "wait", "1", "bad", "slow")
    assert done.returncode == 1
    assert done.stdout == "bad: ended, code 3: broken\nslow: running: \n"
