"""Reinforcement learning on verified rollouts: the policy module that trains the surrogate objective (paper
Eq. 7 and its ablations) and the data module that samples, verifies and batches its rollouts."""

from stable_rl.rl.datamodule import RolloutDataModule
from stable_rl.rl.module import PolicyModule

__all__ = ["PolicyModule", "RolloutDataModule"]
