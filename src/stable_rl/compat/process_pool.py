"""``concurrent.futures.ProcessPoolExecutor`` and ``multiprocessing`` internals stable-rl relies on (checked: Python
3.11-3.13)."""

import signal
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import forkserver, resource_tracker
from multiprocessing.process import BaseProcess


def kill_workers(pool: ProcessPoolExecutor) -> None:
    """SIGKILL every worker process of ``pool`` (a hung one never returns a task): ``pool.kill_workers()``
    from Python 3.14, before it the processes in ``ProcessPoolExecutor._processes`` (pid -> Process)."""
    if hasattr(pool, "kill_workers"):
        pool.kill_workers()
        return
    for process in list((pool._processes or {}).values()):
        process.kill()


def worker_processes(pool: ProcessPoolExecutor) -> list[BaseProcess]:
    """The worker processes of ``pool`` now (``ProcessPoolExecutor._processes``, pid -> Process). A pool that breaks
    empties it from its own thread, so whoever reports a death keeps these beforehand: a Process keeps its exit code
    (None: running; -N: ended by signal N)."""
    return list((pool._processes or {}).values())


def start_forkserver() -> None:
    """Start the process's forkserver, unless it runs, with SIGTERM and SIGINT blocked: it and the processes it forks
    inherit that mask, so a signal to the whole process group (``timeout``, a scheduler's end of job, Ctrl-C) leaves
    them to the process that owns them. It exits when the last process that can use it has."""
    resource_tracker.ensure_running()  # first: starting it unblocks SIGTERM and SIGINT in the calling thread
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
