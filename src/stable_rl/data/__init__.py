"""Prompt sources, the prompt template, the verifier and the RolloutDataModule."""

from stable_rl.data.datamodule import RolloutDataModule
from stable_rl.data.eval_sets import ASDivPrompts, ChampPrompts
from stable_rl.data.prompts import FilePrompts, Problem, PromptSource, ReasoningGymPrompts
from stable_rl.data.template import PromptTemplate
from stable_rl.data.verifier import MathVerifier

__all__ = [
    "ASDivPrompts",
    "ChampPrompts",
    "FilePrompts",
    "MathVerifier",
    "Problem",
    "PromptSource",
    "PromptTemplate",
    "ReasoningGymPrompts",
    "RolloutDataModule",
]
