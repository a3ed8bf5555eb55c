"""Prompt sources, evaluation sets, the prompt template and the verifier (shared by RL and SFT)."""

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
]
