"""AtomicCheckpointIO: a process SIGKILLed in the middle of a save leaves the previous checkpoint whole."""

import errno
import os
import shutil
import signal
import subprocess
import sys

import pytest
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


def test_a_full_disk_mid_save_is_named_and_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint({"step": 1}, path)

    def half_then_full(obj, f):  # the disk fills half-way through the write
        f.write(b"half a checkpoint")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", half_then_full)
    with pytest.raises(OSError) as caught:
        AtomicCheckpointIO().save_checkpoint({"step": 2}, path)
    assert str(caught.value) == (
        f"checkpoint {path} was not saved: the disk holding {tmp_path} is full (ENOSPC: No space left on device). "
        "Free space there (old checkpoints, a lower ModelCheckpoint save_top_k) or set the ModelCheckpoint's "
        "dirpath to a disk with room; then resume with --ckpt_path from the newest checkpoint left. Nothing "
        "half-written was left in its place"
    )
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]
    assert AtomicCheckpointIO().load_checkpoint(path) == {"step": 1}


def test_a_run_folder_deleted_mid_save_is_named(tmp_path, monkeypatch):
    folder = tmp_path / "run" / "checkpoints"
    real_save = torch.save

    def save_then_delete_the_run(obj, f):
        real_save(obj, f)
        shutil.rmtree(tmp_path / "run")  # e.g. an `rm -rf runs/old` that caught the live run

    monkeypatch.setattr(torch, "save", save_then_delete_the_run)
    with pytest.raises(OSError) as caught:
        AtomicCheckpointIO().save_checkpoint({"step": 2}, folder / "last.ckpt")
    assert str(caught.value) == (
        f"checkpoint {folder / 'last.ckpt'} was not saved: its folder {folder} was deleted or moved while the run "
        "wrote into it (ENOENT: No such file or directory). Leave a run's folder in place while it runs; then resume "
        "with --ckpt_path from the newest checkpoint left. Nothing half-written was left in its place"
    )
    assert not (tmp_path / "run").exists()
