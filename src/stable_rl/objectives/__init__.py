"""Objectives, swappable by ``class_path`` in YAML (e.g. ``stable_rl.objectives.MiniRL``)."""

from stable_rl.objectives.advantages import group_advantages
from stable_rl.objectives.base import LossInputs, LossOutput, Objective
from stable_rl.objectives.cispo import CISPO
from stable_rl.objectives.drgrpo import DrGRPO
from stable_rl.objectives.grpo import GRPO
from stable_rl.objectives.minirl import MiniRL

__all__ = ["CISPO", "GRPO", "DrGRPO", "LossInputs", "LossOutput", "MiniRL", "Objective", "group_advantages"]
