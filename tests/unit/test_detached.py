"""tools/gpu-offline/detached.sh: jobs that outlive the shell that started them, and a wait with a time limit."""

import os
import signal
import subprocess
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "gpu-offline" / "detached.sh"


def detached(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """The script called from tmp_path/checkout (the working directory its jobs run a copy of)."""
    env = {"PATH": "/usr/bin:/bin", "DETACHED_DIR": str(tmp_path)}
    checkout = tmp_path / "checkout"
    checkout.mkdir(exist_ok=True)
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=env, cwd=checkout, capture_output=True, text=True, timeout=60
    )


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


def test_a_job_survives_the_end_of_its_starters_session(tmp_path):
    """As when the shell that started a job ends: every process of the starter's session and process group
    killed once the starter returns (here, while the caller still runs); the job, in a session of its own, runs on."""
    env = {"PATH": "/usr/bin:/bin", "DETACHED_DIR": str(tmp_path)}
    call = f"bash {SCRIPT} start job bash -c 'sleep 2; echo survived'; sleep 60"
    with subprocess.Popen(
        ["bash", "-c", call], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True
    ) as caller:
        assert caller.stdout.readline().startswith("started job")
        os.killpg(caller.pid, signal.SIGKILL)  # the caller's session: its process group is its leader's id
    done = detached(tmp_path, "wait", "30", "job")
    assert (done.returncode, done.stdout) == (0, "job: ended, code 0: survived\n")


def test_a_name_in_use_is_refused_and_an_unknown_or_killed_job_is_named_at_once(tmp_path):
    assert detached(tmp_path, "start", "busy", "sleep", "30").returncode == 0
    again = detached(tmp_path, "start", "busy", "true")
    assert again.returncode == 1 and "still running" in again.stderr
    os.kill(int((tmp_path / "busy.pid").read_text()), signal.SIGKILL)  # the wrapper: no exit code written
    start = time.monotonic()
    done = detached(tmp_path, "wait", "30", "busy", "never")
    assert time.monotonic() - start < 10  # neither is waited for
    assert done.returncode == 1
    assert done.stdout.splitlines()[0].startswith("busy: lost: ended without an exit code")
    assert done.stdout.splitlines()[1].startswith("never: unknown: never started on this machine")
    assert detached(tmp_path, "start", "busy", "true").returncode == 0  # the name is free again


def test_the_wait_exits_3_while_a_job_runs_and_none_failed(tmp_path):
    detached(tmp_path, "start", "slow", "sleep", "5")
    assert detached(tmp_path, "wait", "0", "slow").returncode == 3


def test_jobs_run_in_one_copy_of_the_checkout_that_later_changes_do_not_reach(tmp_path):
    """Jobs run in one copy of the checkout, made at the first start: a job reads the files as they were then, even
    if the checkout is replaced meanwhile, and a later job sees what an earlier one wrote there (the cold start's
    model, for the wave)."""
    checkout = tmp_path / "checkout"
    (checkout / ".gpu").mkdir(parents=True)
    (checkout / ".gpu" / "part").write_text("big")
    (checkout / "code.py").write_text("old")
    assert detached(tmp_path, "start", "first", "bash", "-c", "sleep 1; cat code.py; echo made > model").returncode == 0
    (checkout / "code.py").write_text("new")  # the checkout replaced
    assert detached(tmp_path, "wait", "30", "first").stdout == "first: ended, code 0: old\n"
    detached(tmp_path, "start", "second", "bash", "-c", "cat model code.py; ls -A")
    done = detached(tmp_path, "wait", "30", "second")
    assert done.returncode == 0
    assert (tmp_path / "second.log").read_text() == "made\nold.detached-copy\ncode.py\nmodel\n"
    assert not (checkout / "model").exists()
    assert detached(tmp_path, "tree").stdout == f"{tmp_path / 'tree'}\n"


def test_a_tree_inside_the_checkout_or_a_folder_not_copied_here_is_refused(tmp_path):
    def start(cwd, tree):
        env = {"PATH": "/usr/bin:/bin", "DETACHED_DIR": str(tmp_path / "jobs"), "DETACHED_TREE": str(tree)}
        return subprocess.run(
            ["bash", str(SCRIPT), "start", "x", "true"], env=env, cwd=cwd, capture_output=True, text=True
        )

    inside = start(tmp_path, tmp_path / "t")
    assert inside.returncode == 2 and "inside the directory it copies" in inside.stderr
    (tmp_path / "checkout").mkdir()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep").write_text("data")
    other = start(tmp_path / "checkout", tmp_path / "mine")
    assert other.returncode == 2 and "a folder this script did not copy" in other.stderr
    assert (tmp_path / "mine" / "keep").read_text() == "data"
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / ".detached-copying").touch()  # a copy cut off: made again
    assert start(tmp_path / "checkout", tmp_path / "half").returncode == 0
    assert sorted(p.name for p in (tmp_path / "half").iterdir()) == [".detached-copy"]
