"""``stable-rl``: LightningCLI over the PolicyModule and RolloutDataModule.

stable-rl fit --config recipes/quickstart.yaml
stable-rl fit --config recipes/minirl.yaml --config recipes/paper/grpo.yaml
"""

import warnings

from lightning import LightningDataModule, LightningModule
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.utilities.exceptions import SIGTERMException

from stable_rl.callbacks.termination_checkpoint import EXIT_TERMINATED, TerminationCheckpoint

# Lightning 2.6 warns on every step checkpoint under manual optimization that the state saved is the
# one after the update: exactly what a resumed run needs (step k's weights with global_step k).
warnings.filterwarnings("ignore", "Using ModelCheckpoint with manual optimization", UserWarning)
# vLLM initialises torch.distributed in this process (a world of one), so Lightning asks for sync_dist on
# epoch-level logs; the validation metrics are torchmetrics, already reduced across ranks by compute().
warnings.filterwarnings("ignore", r"It is recommended to use `self.log\('val/")


class StableRLCLI(LightningCLI):
    """LightningCLI that gives every run a ``TerminationCheckpoint`` (whatever the YAML's callbacks)."""

    def before_fit(self) -> None:
        if not any(isinstance(c, TerminationCheckpoint) for c in self.trainer.callbacks):
            self.trainer.callbacks.append(TerminationCheckpoint())


def main(args: list[str] | None = None, run: bool = True) -> LightningCLI:
    """Run the CLI; ``args`` replaces ``sys.argv[1:]``; ``run=False`` only builds the objects."""
    return StableRLCLI(
        LightningModule,
        LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        save_config_kwargs={"overwrite": True},
        # checkpoints written beside their target, fsynced and renamed (``stable_rl.checkpoint_io``)
        trainer_defaults={"plugins": [{"class_path": "stable_rl.checkpoint_io.AtomicCheckpointIO"}]},
        args=args,
        run=run,
    )


def console() -> None:
    """The ``stable-rl`` console script: exit status 0 on success, 143 when terminated (SIGTERM) after
    keeping a checkpoint to resume from."""
    try:
        main()
    except SIGTERMException:
        raise SystemExit(EXIT_TERMINATED) from None


if __name__ == "__main__":
    console()
