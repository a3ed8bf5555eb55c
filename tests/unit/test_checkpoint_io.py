"""AtomicCheckpointIO: a process SIGKILLed in the middle of a save leaves the previous checkpoint whole."""

import os
import signal
import subprocess
import sys

import torch

from stable_rl.checkpoint_io import AtomicCheckpointIO

KILLED_MID_SAVE = """
import io, sys, time, torch
from stable_rl.checkpoint_io import AtomicCheckpointIO
path = sys.argv[1]
AtomicCheckpointIO().save_checkpoint({"step": 1, "w": torch.arange(100_000.0)}, path)
real_save = torch.save
def half_then_hang(obj, f):  # a slow disk: half of the checkpoint written when the kill comes
    buffer = io.BytesIO()
    real_save(obj, buffer)
    f.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    f.flush()
    print("half written", flush=True)
    time.sleep(600)
torch.save = half_then_hang
AtomicCheckpointIO().save_checkpoint({"step": 2, "w": torch.zeros(100_000)}, path)
"""


def test_a_kill_mid_save_leaves_the_previous_checkpoint_loadable(tmp_path):
    path = tmp_path / "last.ckpt"
    with subprocess.Popen(
        [sys.executable, "-c", KILLED_MID_SAVE, str(path)], stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            assert child.stdout.readline().strip() == "half written"
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL
    partial = [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]
    assert len(partial) == 1 and 0 < partial[0].stat().st_size < path.stat().st_size  # the kill hit mid-write
    checkpoint = AtomicCheckpointIO().load_checkpoint(path)
    assert checkpoint["step"] == 1 and torch.equal(checkpoint["w"], torch.arange(100_000.0))


def test_a_failed_save_removes_its_staging_file_and_keeps_the_target(tmp_path):
    path = tmp_path / "step=1.ckpt"
    AtomicCheckpointIO().save_checkpoint({"step": 1}, path)
    try:
        AtomicCheckpointIO().save_checkpoint({"step": 2, "bad": lambda: None}, path)  # lambdas do not pickle
    except Exception:
        pass
    else:
        raise AssertionError("pickling a lambda should fail")
    assert [p.name for p in tmp_path.iterdir()] == ["step=1.ckpt"]
    assert AtomicCheckpointIO().load_checkpoint(path) == {"step": 1}
