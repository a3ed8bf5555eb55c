"""Export the trained policy in HF format (``save_pretrained``) for use outside stable-rl."""

import re
import shutil
from pathlib import Path

import lightning as L
from transformers import AutoTokenizer

from stable_rl.checkpoint_io import fsync, replace_directory

# what save_pretrained writes for a model and its tokenizer: an export replaces these and nothing else
EXPORT_FILES = re.compile(
    r"(generation_)?config\.json|model(-\d+-of-\d+)?\.safetensors|model\.safetensors\.index\.json"
    r"|tokenizer(_config)?\.json|special_tokens_map\.json|added_tokens\.json|chat_template\.(jinja|json)"
    r"|vocab\.(json|txt)|merges\.txt|(tokenizer|spiece|sentencepiece\.bpe)\.model"
)


class HFExport(L.Callback):
    """At the end of training, writes the policy and its tokenizer to ``dirpath``, atomically: a
    reader sees the previous export or the new one, never a half-written directory. Sharded (FSDP2)
    weights are gathered by every process, rank 0 writes them.

    Args:
        dirpath: the HF model directory to (re)write: new, empty, or a previous export (it is replaced
            whole, so a directory holding anything else, files added to a previous export included, or the model
            directory the run trains from, is refused before training starts).
    """

    def __init__(self, dirpath: str) -> None:
        self.dirpath = Path(dirpath)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Refuse a target whose contents the export would delete: a file, the model directory the run trains from,
        or a non-empty directory holding anything but the files of an earlier export (``EXPORT_FILES``): e.g.
        ``dirpath: runs``, or a model card added to an export."""
        target = self.dirpath
        if target.exists() and not target.is_dir():
            raise ValueError(f"HFExport dirpath {target} is a file: choose a directory for the exported model")
        model_path = getattr(pl_module, "model_path", None)
        if model_path is not None and target.resolve() == Path(model_path).resolve():
            raise ValueError(
                f"HFExport dirpath {target} is the model directory the run trains from (model.init_args.model_path="
                f"{model_path}): the export would overwrite the base model. Choose another directory, e.g. "
                "runs/<name>/hf"
            )
        if not (target.is_dir() and any(target.iterdir())):
            return
        if not (target / "config.json").is_file():
            raise ValueError(
                f"HFExport dirpath {target} holds files that are not an earlier export (no config.json), and the "
                "export replaces the directory whole: choose a new or empty directory, e.g. runs/<name>/hf"
            )
        added = sorted(p.name for p in target.iterdir() if not EXPORT_FILES.fullmatch(p.name))
        if added:
            raise ValueError(
                f"HFExport dirpath {target} holds files an export does not write ({', '.join(added)}), and the "
                f"export replaces the directory whole: move them out of {target}, or choose another directory"
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
