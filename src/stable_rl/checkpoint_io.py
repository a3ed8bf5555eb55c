"""Checkpoints that survive a kill mid-save: written beside their target, fsynced, renamed."""

import ctypes
import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from stable_rl.compat.lightning import is_local_path


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` whose local saves are atomic and durable: the checkpoint is written to a
    temporary file in the target's directory, flushed to disk (fsync), renamed over the target and
    the directory entry fsynced. A process killed at any point leaves the previous checkpoint whole; a save
    the system stops (a full disk, the folder deleted) leaves it whole too and is named with its fix.

    Lightning's own local save stages the file in the system temp directory and moves it, which is a
    plain copy into the target when the two are on different filesystems (a kill mid-copy leaves a
    truncated checkpoint) and never fsyncs. Remote paths (``s3://`` ...) keep Lightning's save.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None or not is_local_path(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        path = Path(str(path).removeprefix("file://"))
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, staging = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(staging, path)
            fsync(path.parent)
        except OSError as error:
            Path(staging).unlink(missing_ok=True)
            raise OSError(save_failure(path, error)) from error
        except BaseException:
            Path(staging).unlink(missing_ok=True)
            raise


def save_failure(path: Path, error: OSError) -> str:
    """What stopped the save of checkpoint ``path`` (a full disk, its folder deleted), and the fix."""
    cause = f"{errno.errorcode.get(error.errno or 0, 'error')}: {error.strerror or error}"
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        what = (
            f"the disk holding {path.parent} is full ({cause}). Free space there (old checkpoints, a lower "
            "ModelCheckpoint save_top_k) or set the ModelCheckpoint's dirpath to a disk with room"
        )
    elif error.errno == errno.ENOENT:
        what = (
            f"its folder {path.parent} was deleted or moved while the run wrote into it ({cause}). Leave a run's "
            "folder in place while it runs"
        )
    else:
        what = f"{path.parent} failed ({cause}). Fix that folder (its permissions, its disk)"
    return (
        f"checkpoint {path} was not saved: {what}; then resume with --ckpt_path from the newest checkpoint left. "
        "Nothing half-written was left in its place"
    )


def check_writable(directory: str | Path, setting: str) -> None:
    """Create ``directory`` if needed and write a file there, so a run whose checkpoints or logs cannot be
    written fails before its first rollout rather than at its first save; ``setting`` names what sets it."""
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory):
            pass
    except OSError as error:
        raise ValueError(
            f"{directory} is not a writable directory ({error.strerror or error}): set {setting} to a directory "
            "this process can write, or fix its permissions"
        ) from error


def fsync(path: Path) -> None:
    """Flush a file's data, or a directory's entries (a rename in it), to disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def replace_directory(source: Path, target: Path) -> None:
    """Put the directory ``source`` at ``target`` in one step, replacing what is there (a directory or a
    file): Linux's ``renameat2(RENAME_EXCHANGE)`` swaps the two atomically, then the old one (now at
    ``source``) is removed. Where that call is missing, the old one is renamed aside first (a kill
    between the two renames leaves it at ``.<name>.old``)."""
    if target.exists() and not _exchange(source, target):
        old = target.with_name(f".{target.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        target.rename(old)
        source.rename(target)
        source = old
    elif not target.exists():
        source.rename(target)
    fsync(target.parent)
    if source.is_dir() and not source.is_symlink():
        shutil.rmtree(source)
    else:
        source.unlink(missing_ok=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2`` with ``RENAME_EXCHANGE``); False where unsupported."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError, TypeError):  # not glibc >= 2.28 (musl, macOS, Windows)
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    error = ctypes.get_errno()
    if error in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):  # this filesystem or kernel cannot
        return False
    raise OSError(error, os.strerror(error), str(a))
