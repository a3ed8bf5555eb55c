"""A job run in a thread of its own while the main thread trains: the rollouts generated ahead (``data.overlap``).

The thread is a daemon (an interpreter that exits never waits for it); ``join`` hands its result, or its error with
the traceback of the thread's frames, to the main thread.
"""

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

import torch

T = TypeVar("T")


class Background(Generic[T]):
    """Runs ``job`` at once in a daemon thread named ``name``, with as many intra-op threads as the caller has (torch
    keeps that count per thread, and kernels may add up in another order with another count)."""

    def __init__(self, job: Callable[[], T], name: str) -> None:
        self._result: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(job, torch.get_num_threads()), name=name, daemon=True)
        self._thread.start()

    def _run(self, job: Callable[[], T], threads: int) -> None:
        torch.set_num_threads(threads)
        try:
            self._result = job()
        except BaseException as error:  # handed to the main thread by ``join``
            error.add_note(f"(raised in the thread {self._thread.name!r}, handed to the main thread)")
            self._error = error

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self) -> None:
        """Wait for the job to end, without its result or error."""
        self._thread.join()

    def join(self) -> T:
        """The job's result, once it has ended; or its error, raised here (once)."""
        self._thread.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self._result
