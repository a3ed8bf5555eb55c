"""Rollout engines (swappable by ``class_path``) and the batch they produce."""

from stable_rl.rollout.batch import RolloutBatch
from stable_rl.rollout.engine import RolloutEngine, Sample, Sampling
from stable_rl.rollout.hf_engine import HFEngine
from stable_rl.rollout.vllm_engine import VLLMEngine

__all__ = ["HFEngine", "RolloutBatch", "RolloutEngine", "Sample", "Sampling", "VLLMEngine"]
