"""On SIGTERM (a scheduler's preemption, ``kill``), keep a checkpoint to resume from and exit non-zero."""

from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from stable_rl import StableRLWarning

EXIT_TERMINATED = 143  # 128 + SIGTERM, what a shell reports for a terminated process


class TerminationCheckpoint(L.Callback):
    """Lightning finishes the global step in progress when SIGTERM arrives and then stops; this callback
    then saves the run's ``last`` checkpoint (in each ``ModelCheckpoint`` that keeps one, else
    ``<log_dir>/checkpoints/terminated-step=<n>.ckpt``), at a step boundary like every other checkpoint, so
    ``--ckpt_path`` resumes exactly. ``stable-rl`` adds it to every run and exits with status 143
    (Lightning alone exits 0, as if training had finished)."""

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if not isinstance(exception, SIGTERMException):
            return
        paths = []
        for keeper in trainer.checkpoint_callbacks:
            if not (isinstance(keeper, ModelCheckpoint) and keeper.save_last and keeper.dirpath):
                continue
            path = Path(keeper.format_checkpoint_name({}, keeper.CHECKPOINT_NAME_LAST))
            keeper.last_model_path = str(path)  # saved with it: the resumed run then updates this file, not last-v1
            paths.append(path)
        if not paths:
            root = Path(trainer.log_dir or trainer.default_root_dir) / "checkpoints"
            paths = [root / f"terminated-step={trainer.global_step}.ckpt"]
        for path in paths:
            trainer.save_checkpoint(path)
        rank_zero_warn(
            f"terminated (SIGTERM) after step {trainer.global_step}: checkpoint kept at {paths[0]}",
            category=StableRLWarning,
        )
