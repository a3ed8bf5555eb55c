"""Objectives, swappable by ``class_path`` in YAML (e.g. ``stable_rl.objectives.MiniRL``)."""

from stable_rl.objectives.advantages import group_advantages
from stable_rl.objectives.base import LossInputs, LossOutput, Objective
from stable_rl.objectives.cispo import CISPO
from stable_rl.objectives.dppo import DPPO
from stable_rl.objectives.drgrpo import DrGRPO
from stable_rl.objectives.grpo import GRPO
from stable_rl.objectives.gspo import GSPO
from stable_rl.objectives.icepop import IcePop
from stable_rl.objectives.masked_is import MaskedIS
from stable_rl.objectives.minirl import MiniRL
from stable_rl.objectives.sequence_is import SequenceIS

__all__ = [
    "CISPO",
    "DPPO",
    "GRPO",
    "GSPO",
    "DrGRPO",
    "IcePop",
    "LossInputs",
    "LossOutput",
    "MaskedIS",
    "MiniRL",
    "Objective",
    "SequenceIS",
    "group_advantages",
]
