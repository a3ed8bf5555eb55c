"""Validate once before the first update, so every run logs its starting accuracy at step 0."""

import lightning as L

from stable_rl.compat.lightning import run_fit_validation


class ValidateBeforeTraining(L.Callback):
    """Runs the fit's own validation loop at the start of training (Lightning only validates after
    ``val_check_interval`` batches), so held-out avg@n is logged before and during RL."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.global_step > 0 or trainer.limit_val_batches == 0:
            return  # a resumed run validated at its start already
        run_fit_validation(trainer)
