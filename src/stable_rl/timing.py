"""Wall time of the phases of a global step: rollout, reward, pi_old recompute, update, weight sync."""

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def timed(times: dict[str, float], phase: str) -> Iterator[None]:
    """Add the block's wall time to ``times[phase]`` (seconds). Queued GPU work is waited for at both
    ends, so each phase is charged its own kernels (one synchronisation per phase boundary)."""
    _synchronize()
    start = time.perf_counter()
    try:
        yield
    finally:
        _synchronize()
        times[phase] = times.get(phase, 0.0) + time.perf_counter() - start


def _synchronize() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
