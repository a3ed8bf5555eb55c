"""Export the trained policy in HF format (``save_pretrained``) for use outside stable-rl."""

import shutil
from pathlib import Path

import lightning as L
from lightning.pytorch.utilities import rank_zero_only
from transformers import AutoTokenizer


class HFExport(L.Callback):
    """At the end of training, writes the policy and its tokenizer to ``dirpath``, atomically: a
    reader sees the previous export or the new one, never a half-written directory.

    Args:
        dirpath: the HF model directory to (re)write.
    """

    def __init__(self, dirpath: str) -> None:
        self.dirpath = Path(dirpath)

    @rank_zero_only
    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        staging = self.dirpath.with_name(self.dirpath.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        pl_module.policy.save_pretrained(staging)
        AutoTokenizer.from_pretrained(pl_module.model_path).save_pretrained(staging)
        previous = self.dirpath.with_name(self.dirpath.name + ".previous")
        if self.dirpath.exists():
            shutil.rmtree(previous, ignore_errors=True)
            self.dirpath.rename(previous)
        staging.rename(self.dirpath)
        shutil.rmtree(previous, ignore_errors=True)
