"""One run at a time in a run folder: two runs started at once into one logger version (or a requeue while the
run still runs) interleaved their metrics and checkpoints. The folder's lock file, ``.<folder>.lock`` beside it (in
the folder, Lightning's logger would take the folder for an earlier run's), is held (``flock``) for the whole fit
and removed at its end; the kernel lets go of it when the process ends, however it ends, so the lock file a killed
run leaves blocks nothing."""

import fcntl
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def lock_file(directory: Path) -> Path:
    """The lock file of a run folder."""
    return directory.parent / f".{directory.name}.lock"


@contextmanager
def held_run_folder(directory: Path) -> Iterator[None]:
    """Hold ``directory`` for this process, or refuse, naming the process that holds it."""
    path = lock_file(directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        lock = open(path, "a+")  # noqa: SIM115 (closed below, or at the end of the fit)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            lock.close()
            raise RuntimeError(
                f"run folder {directory} is in use by another run ({holder}): two runs in one folder interleave "
                "their metrics and checkpoints. Wait for that run to end, or give this one its own "
                "trainer.logger.init_args.name or version"
            ) from None
        if path.exists() and os.stat(path).st_ino == os.fstat(lock.fileno()).st_ino:
            break
        lock.close()  # its holder removed it at the end of its run while this one opened it: take the new one
    try:
        lock.truncate(0)
        lock.write(f"process {os.getpid()} on {socket.gethostname()}\n")
        lock.flush()
        yield
    finally:
        path.unlink()  # while held: whoever opened it before then takes a new one (above)
        lock.close()
