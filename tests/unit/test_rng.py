"""The process's RNGs: seeded for a call and put back after it."""

import random

import numpy as np
import torch

from stable_rl.rng import seeded_rng


def draws() -> tuple[list[float], float, float]:
    return torch.rand(3).tolist(), random.random(), float(np.random.rand())


def seed_all(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def test_a_seeded_call_draws_from_its_seed_and_leaves_the_process_rngs_as_they_were():
    seed_all(11)
    undisturbed = draws()

    seed_all(11)
    with seeded_rng(4):
        inside = torch.rand(3).tolist()
        draws()  # whatever else is drawn inside is undone too
    assert draws() == undisturbed

    torch.manual_seed(4)
    assert inside == torch.rand(3).tolist()
    with seeded_rng(5):
        assert torch.rand(3).tolist() != inside
