"""Lightning internals stable-rl relies on (checked: lightning 2.6.6, torch 2.13)."""

from lightning.fabric.utilities.cloud_io import _is_local_file_protocol
from lightning.fabric.utilities.load import _METADATA_FILENAME
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.strategies import ModelParallelStrategy

SHARDED_CHECKPOINT_METADATA: str = _METADATA_FILENAME
"""The file (``meta.pt``) that ``ModelParallelStrategy.save_checkpoint`` writes beside the torch distributed
checkpoint's shards, holding everything but the weights and optimizer states
(``lightning.fabric.utilities.load._METADATA_FILENAME``): a directory with it is a sharded checkpoint."""


def is_local_path(path) -> bool:
    """Whether ``path`` is on the local filesystem (a plain path or ``file://``, not ``s3://`` ...), as
    Lightning's checkpoint IO decides it (``lightning.fabric.utilities.cloud_io._is_local_file_protocol``)."""
    return _is_local_file_protocol(path)


def attached_trainer(module: LightningModule) -> Trainer | None:
    """The trainer ``module`` is attached to, or None (``LightningModule._trainer``; the public ``trainer``
    property raises when there is none)."""
    return module._trainer


def count_skipped_optimizer_step(trainer: Trainer) -> None:
    """Count an optimizer step that was not taken (manual optimization), so ``trainer.global_step`` still
    advances: it is ``fit_loop.epoch_loop.manual_optimization.optim_step_progress.total.completed``, which
    ``optimizer.step()`` increments through the ``LightningOptimizer`` (ready, then completed)."""
    progress = trainer.fit_loop.epoch_loop.manual_optimization.optim_step_progress
    progress.increment_ready()
    progress.increment_completed()


def run_fit_validation(trainer: Trainer) -> None:
    """Run the fit's own validation loop now (``fit_loop.epoch_loop.val_loop.run()``), as Lightning does
    every ``val_check_interval``: metrics are logged at the current step, and the trainer is back in the
    training state afterwards."""
    trainer.validating = True
    trainer.fit_loop.epoch_loop.val_loop.run()
    trainer.training = True


def set_data_parallel_size(strategy: ModelParallelStrategy, size: int) -> None:
    """Set the data-parallel size of a ``ModelParallelStrategy`` before ``setup_environment`` builds its
    device mesh from it (``ModelParallelStrategy._data_parallel_size``; the constructor's
    ``data_parallel_size``, which is only known once the processes are)."""
    strategy._data_parallel_size = size


def saves_distributed_checkpoint(strategy: ModelParallelStrategy) -> bool:
    """Whether the strategy saves one shard file per process (its constructor's
    ``save_distributed_checkpoint``, kept as ``ModelParallelStrategy._save_distributed_checkpoint``)."""
    return strategy._save_distributed_checkpoint


def set_csv_writer(logger, writer) -> None:
    """Make ``writer`` the ``CSVLogger``'s experiment before it makes its own (``CSVLogger._experiment``, which
    its ``experiment`` property creates on first use)."""
    logger._experiment = writer
