"""The cold start: supervised fine-tuning on worked solutions before RL."""

from stable_rl.sft.datamodule import SFTDataModule, TokenBatch
from stable_rl.sft.module import SFTModule

__all__ = ["SFTDataModule", "SFTModule", "TokenBatch"]
