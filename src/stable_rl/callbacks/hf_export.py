"""Export the trained policy in HF format (``save_pretrained``) for use outside stable-rl."""

import shutil
from pathlib import Path

import lightning as L
from transformers import AutoTokenizer

from stable_rl.checkpoint_io import fsync, replace_directory


class HFExport(L.Callback):
    """At the end of training, writes the policy and its tokenizer to ``dirpath``, atomically: a
    reader sees the previous export or the new one, never a half-written directory. Sharded (FSDP2)
    weights are gathered by every process, rank 0 writes them.

    Args:
        dirpath: the HF model directory to (re)write.
    """

    def __init__(self, dirpath: str) -> None:
        self.dirpath = Path(dirpath)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        writer = trainer.global_rank == 0
        weights = {}
        for name, weight in pl_module.full_weights():  # gathered one at a time by every process (FSDP2)
            if writer:
                weights[name] = weight.detach().to("cpu", copy=True)
        if writer:
            staging = self.dirpath.with_name(self.dirpath.name + ".partial")
            shutil.rmtree(staging, ignore_errors=True)
            pl_module.policy.save_pretrained(staging, state_dict=weights)
            AutoTokenizer.from_pretrained(pl_module.model_path).save_pretrained(staging)
            for path in [*staging.iterdir(), staging]:
                fsync(path)
            replace_directory(staging, self.dirpath)
