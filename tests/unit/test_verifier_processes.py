"""The verifier's processes live and die with the run: none outlives a SIGKILL of the run, a SIGTERM to the
whole process group (what ``timeout`` and schedulers send) leaves them scoring for the graceful stop, and a worker
killed between calls is replaced."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stable_rl import StableRLWarning
from stable_rl.data.verifier import MathVerifier

REPO = Path(__file__).resolve().parents[2]

# A run in miniature: a verifier that has scored (so its workers exist), its processes' pids on one line; then,
# on SIGTERM, what the graceful stop does: it goes on scoring.
RUN = """
import json, multiprocessing as mp, signal, sys, time
from multiprocessing import forkserver
from stable_rl.data.verifier import MathVerifier

stop = []
signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
verifier = MathVerifier(num_workers=2, timeout=5.0)
rewards = verifier([r"\\boxed{42}", r"\\boxed{41}"], ["42", "42"]).tolist()
workers = [p.pid for p in mp.active_children()]
print(json.dumps({"rewards": rewards, "workers": workers, "forkserver": forkserver._forkserver._forkserver_pid}))
sys.stdout.flush()
deadline = time.monotonic() + 60
while not stop and time.monotonic() < deadline:
    time.sleep(0.05)
rewards = verifier([r"\\boxed{7}", r"\\boxed{8}"], ["7", "7"]).tolist()
print(json.dumps({"stop": stop, "rewards": rewards, "workers": [p.pid for p in mp.active_children()]}))
verifier.close()
"""


def start_run(tmp_path: Path) -> tuple[subprocess.Popen, dict]:
    """The run, in its own process group (as a job under ``timeout`` or a scheduler), and its first line."""
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    stderr = open(tmp_path / "run.err", "w")  # noqa: SIM115 - closed with the process
    run = subprocess.Popen(
        [sys.executable, "-c", RUN], stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, start_new_session=True
    )
    stderr.close()
    line = run.stdout.readline()
    assert line, (tmp_path / "run.err").read_text()[-3000:]
    return run, json.loads(line)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by whoever adopted it, counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux's")
def test_nothing_of_the_verifier_outlives_a_run_killed_with_sigkill(tmp_path):
    run, first = start_run(tmp_path)
    assert first["rewards"] == [1.0, 0.0]
    pids = [*first["workers"], first["forkserver"]]
    assert len(first["workers"]) == 2 and all(alive(pid) for pid in pids)
    run.kill()
    run.communicate()
    assert wait_until(lambda: not any(alive(pid) for pid in pids), 5), [pid for pid in pids if alive(pid)]


def test_a_sigterm_to_the_whole_process_group_leaves_the_verifier_scoring(tmp_path):
    """The graceful stop scores its last rollout after SIGTERM: the workers must not die of the same signal."""
    run, first = start_run(tmp_path)
    assert first["rewards"] == [1.0, 0.0]
    os.killpg(run.pid, signal.SIGTERM)
    out, _ = run.communicate(timeout=60)
    assert run.returncode == 0, (tmp_path / "run.err").read_text()[-3000:]
    assert json.loads(out) == {"stop": [signal.SIGTERM], "rewards": [1.0, 0.0], "workers": first["workers"]}
    assert "Warning" not in (tmp_path / "run.err").read_text()  # the same pool, not a rebuilt one


def gone(pid: int, within: float = 5.0) -> None:
    """Wait until ``pid`` has ended and been reaped, without reading its exit code (the pool's thread reads it; a
    second reader of a forkserver child's exit code races it and may read 255)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} still there after {within} s")


def test_a_worker_killed_between_calls_is_replaced_with_a_warning():
    """The replacement pool's workers start and import math-verify inside the call: a timeout that leaves room for
    that on a loaded machine."""
    with MathVerifier(num_workers=2, timeout=30.0) as verifier:
        assert verifier([r"\boxed{1}"], ["1"]).tolist() == [1.0]
        victim = next(iter(verifier._pool._processes.values()))
        os.kill(victim.pid, signal.SIGKILL)
        gone(victim.pid)
        with pytest.warns(StableRLWarning, match=r"a math-verify worker process died \(.*SIGKILL.*\): the verifier"):
            rewards = verifier([r"\boxed{2}", r"\boxed{3}", r"\boxed{4}"], ["2", "2", "4"])
        assert rewards.tolist() == [1.0, 0.0, 1.0]
        assert verifier([r"\boxed{5}"], ["5"]).tolist() == [1.0]  # the new pool goes on


def test_a_death_the_broken_pool_has_already_forgotten_is_still_named():
    """A breaking pool empties its process table from its own thread; on a loaded machine it did so before the
    warning was written, which then named only the other worker's ending (exit code 255) and not the SIGKILL."""
    with MathVerifier(num_workers=2, timeout=30.0) as verifier:
        assert verifier([r"\boxed{1}"], ["1"]).tolist() == [1.0]
        victim = next(iter(verifier._pool._processes.values()))
        os.kill(victim.pid, signal.SIGKILL)
        gone(victim.pid)
        del verifier._pool._processes[victim.pid]  # what the pool's own thread does, here before the call
        with pytest.warns(
            StableRLWarning, match=r"a math-verify worker process died \(.*signal SIGKILL.*\): the verifier"
        ):
            assert verifier([r"\boxed{2}"], ["2"]).tolist() == [1.0]
