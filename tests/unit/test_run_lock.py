"""A run folder is held by one run at a time; a dead run's lock blocks nothing."""

import os
import signal
import socket
import subprocess
import sys

import pytest

from stable_rl.cli.run_lock import held_run_folder, lock_file

HOLDER = """
import fcntl, sys, time
lock = open(sys.argv[1], "a")
fcntl.flock(lock, fcntl.LOCK_EX)
lock.write("process 4242 on node7")
lock.flush()
print("held", flush=True)
time.sleep(120)
"""


def test_a_held_folder_is_refused_naming_its_holder_and_a_dead_holder_blocks_nothing(tmp_path):
    run = tmp_path / "version_0"
    run.mkdir()
    other = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock_file(run))], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline() == "held\n"
        with pytest.raises(RuntimeError) as refused, held_run_folder(run):
            pass
        assert str(refused.value) == (
            f"run folder {run} is in use by another run (process 4242 on node7): two runs in one folder interleave "
            "their metrics and checkpoints. Wait for that run to end, or give this one its own "
            "trainer.logger.init_args.name or version"
        )
    finally:
        other.send_signal(signal.SIGKILL)  # dies holding it
        other.wait()
        other.stdout.close()
    mine = r"is in use by another run \(process \d+ on "
    with held_run_folder(run), pytest.raises(RuntimeError, match=mine), held_run_folder(run):
        pass
    with held_run_folder(run):  # let go when the first run ended
        assert lock_file(run).read_text() == f"process {os.getpid()} on {socket.gethostname()}\n"
    assert not lock_file(run).exists()
