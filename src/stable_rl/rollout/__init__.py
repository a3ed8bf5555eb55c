"""Rollout engines (swappable by ``class_path``) and the batch they produce."""

from stable_rl.rollout.batch import EvalBatch, RolloutBatch
from stable_rl.rollout.engine import RolloutEngine, Sample, Sampling
from stable_rl.rollout.hf_engine import HFEngine
from stable_rl.rollout.vllm_engine import VLLMEngine

__all__ = ["EvalBatch", "HFEngine", "RolloutBatch", "RolloutEngine", "Sample", "Sampling", "VLLMEngine"]
