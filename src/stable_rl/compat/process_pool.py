"""``concurrent.futures.ProcessPoolExecutor`` internals stable-rl relies on (checked: Python 3.11-3.13)."""

from concurrent.futures import ProcessPoolExecutor


def kill_workers(pool: ProcessPoolExecutor) -> None:
    """SIGKILL every worker process of ``pool`` (a hung one never returns a task): ``pool.kill_workers()``
    from Python 3.14, before it the processes in ``ProcessPoolExecutor._processes`` (pid -> Process)."""
    if hasattr(pool, "kill_workers"):
        pool.kill_workers()
        return
    for process in list((pool._processes or {}).values()):
        process.kill()
