"""The process's random-number generators: captured into checkpoints, shielded from engines."""

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch


def rng_states() -> dict[str, Any]:
    """The global states of Python's ``random``, NumPy and torch (CPU and every CUDA device)."""
    name, keys, position, has_gauss, gauss = np.random.get_state()
    numpy = (name, torch.from_numpy(keys.copy()), position, has_gauss, gauss)  # tensors load with weights_only
    states = {"python": random.getstate(), "numpy": numpy, "torch": torch.get_rng_state()}
    if _cuda_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Put back states from ``rng_states``."""
    random.setstate(states["python"])
    name, keys, position, has_gauss, gauss = states["numpy"]
    np.random.set_state((name, keys.numpy(), position, has_gauss, gauss))
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():  # as many devices as both runs see
        for device, state in enumerate(states["cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(state, device)


@contextmanager
def preserved_rng() -> Iterator[None]:
    """Whatever runs inside (e.g. vLLM's start, which reseeds the process) leaves the global RNGs as
    they were."""
    states = rng_states()
    try:
        yield
    finally:
        set_rng_states(states)


@contextmanager
def seeded_rng(seed: int) -> Iterator[None]:
    """The global RNGs seeded with ``seed`` inside (torch's CPU and CUDA generators: what an engine in this
    process samples with when its requests carry no seed of their own), as they were outside."""
    with preserved_rng():
        torch.default_generator.manual_seed(seed)
        if _cuda_initialized():  # not queued for a later CUDA start: ``preserved_rng`` could not undo that
            torch.cuda.manual_seed_all(seed)
        yield


def _cuda_initialized() -> bool:
    """CUDA has started in this process (its generators exist; seeding before would be queued for its start)."""
    return torch.cuda.is_available() and torch.cuda.is_initialized()
