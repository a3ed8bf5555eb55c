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
        dirpath: the HF model directory to (re)write: new, empty, or a previous export (it is replaced
            whole, so a directory holding anything else is refused before training starts).
    """

    def __init__(self, dirpath: str) -> None:
        self.dirpath = Path(dirpath)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Refuse a target whose contents the export would delete: a file, or a non-empty directory
        without the ``config.json`` of an earlier export (e.g. ``dirpath: runs``)."""
        target = self.dirpath
        if target.exists() and not target.is_dir():
            raise ValueError(f"HFExport dirpath {target} is a file: choose a directory for the exported model")
        if target.is_dir() and any(target.iterdir()) and not (target / "config.json").is_file():
            raise ValueError(
                f"HFExport dirpath {target} holds files that are not an earlier export (no config.json), and the "
                "export replaces the directory whole: choose a new or empty directory, e.g. runs/<name>/hf"
            )

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
