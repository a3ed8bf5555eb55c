"""Each private internal of a dependency that ``stable_rl.compat`` relies on, checked on real objects: after
an upgrade of Lightning, transformers or Python, a failure here names the assumption that broke (and the
function in ``stable_rl/compat/`` to adapt), instead of a training run failing somewhere inside it."""

import inspect
import multiprocessing as mp
import os
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import lightning as L
import pytest
import torch
from lightning.pytorch.strategies import ModelParallelStrategy
from torch import nn
from torch.utils.data import DataLoader

from stable_rl.compat.lightning import (
    SHARDED_CHECKPOINT_METADATA,
    attached_trainer,
    count_skipped_optimizer_step,
    is_local_path,
    run_fit_validation,
    saves_distributed_checkpoint,
    set_data_parallel_size,
)
from stable_rl.compat.process_pool import kill_workers
from stable_rl.compat.transformers import no_split_module_classes

UPGRADE = "an upgrade changed the internal behind stable_rl.compat.{}: adapt it there"


def trainer(**options) -> L.Trainer:
    """A real minimal CPU trainer: no logger, checkpoints, progress bar or summary."""
    quiet = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False}
    return L.Trainer(accelerator="cpu", devices=1, enable_model_summary=False, **quiet, **options)


class ManualModule(L.LightningModule):
    """Manual optimization of one weight; ``skip`` says which batches skip their update."""

    def __init__(self, skip=lambda batch_idx: False) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.weight = nn.Parameter(torch.zeros(1))
        self.skip = skip
        self.events: list[tuple[str, int]] = []

    def training_step(self, batch, batch_idx: int) -> None:
        self.events.append(("train", self.global_step))
        assert self.trainer.training, "the trainer is back in the training state"
        optimizer = self.optimizers()
        optimizer.zero_grad()
        self.manual_backward((self.weight - batch.float().mean()).pow(2).sum())
        if self.skip(batch_idx):
            count_skipped_optimizer_step(self.trainer)
        else:
            optimizer.step()

    def validation_step(self, batch, batch_idx: int) -> None:
        self.events.append(("val", self.global_step))
        self.log("val/loss", (self.weight - batch.float().mean()).pow(2).sum())

    def train_dataloader(self) -> DataLoader:
        return DataLoader(torch.arange(10), batch_size=1)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(torch.arange(2), batch_size=1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_a_module_without_a_trainer_has_none_and_a_fitted_one_its_trainer():
    module = ManualModule()
    assert attached_trainer(module) is None, UPGRADE.format("lightning.attached_trainer")
    with pytest.raises(RuntimeError, match="not attached to a `Trainer`"):
        _ = module.trainer  # why the private attribute is read: the public property raises
    fit = trainer(max_steps=1, limit_val_batches=0)
    fit.fit(module)
    assert attached_trainer(module) is fit, UPGRADE.format("lightning.attached_trainer")


def test_a_skipped_optimizer_step_counts_towards_global_step_and_max_steps():
    """Every other update skipped: global_step still advances once per batch, and max_steps=4 stops after
    four batches, two of them updates."""
    module = ManualModule(skip=lambda batch_idx: batch_idx % 2 == 1)
    fit = trainer(max_steps=4, limit_val_batches=0)
    fit.fit(module)
    message = UPGRADE.format("lightning.count_skipped_optimizer_step")
    assert [step for _, step in module.events] == [0, 1, 2, 3], message
    assert fit.global_step == 4, message
    assert fit.fit_loop.epoch_loop.manual_optimization.optim_step_progress.total.completed == 4, message


def test_the_fit_validation_loop_runs_at_step_zero_and_training_resumes():
    """Run from ``on_train_start`` (as ``ValidateBeforeTraining`` does): validation comes before the first
    update, logs its metrics, and the training loop then runs as usual."""

    class Early(L.Callback):
        def on_train_start(self, trainer, pl_module) -> None:
            run_fit_validation(trainer)
            self.metrics = dict(trainer.callback_metrics)

    module, early = ManualModule(), Early()
    fit = trainer(max_steps=2, limit_val_batches=2, val_check_interval=2, num_sanity_val_steps=0, callbacks=[early])
    fit.fit(module)
    message = UPGRADE.format("lightning.run_fit_validation")
    assert module.events == [("val", 0), ("val", 0), ("train", 0), ("train", 1), ("val", 2), ("val", 2)], message
    assert "val/loss" in early.metrics and fit.state.fn == "fit", message


def test_model_parallel_strategy_keeps_its_settings_where_compat_reads_and_writes_them():
    message = UPGRADE.format("lightning.set_data_parallel_size / saves_distributed_checkpoint")
    for saves in (True, False):
        assert saves_distributed_checkpoint(ModelParallelStrategy(save_distributed_checkpoint=saves)) is saves, message
    strategy = ModelParallelStrategy(data_parallel_size="auto")
    set_data_parallel_size(strategy, 3)
    assert strategy._data_parallel_size == 3, message
    # setup_environment builds the device mesh from the attribute, replacing "auto" only
    source = inspect.getsource(ModelParallelStrategy.setup_environment)
    assert 'if self._data_parallel_size == "auto"' in source and "_setup_device_mesh(" in source, message
    assert "self._data_parallel_size, self._tensor_parallel_size" in source, message


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled, unavailable or uninitialized:UserWarning")
def test_the_sharded_checkpoint_metadata_is_the_file_model_parallel_strategy_writes(tmp_path):
    """A distributed checkpoint written by Lightning's ``ModelParallelStrategy`` (one process, no process
    group: torch's distributed checkpoint then writes alone) is a directory with the shards and
    ``SHARDED_CHECKPOINT_METADATA``, holding the rest of the checkpoint."""
    path = tmp_path / "step=3.ckpt"
    checkpoint = {"state_dict": {"w": torch.arange(4.0)}, "optimizer_states": [], "global_step": 3}
    ModelParallelStrategy(save_distributed_checkpoint=True).save_checkpoint(checkpoint, path)
    message = UPGRADE.format(f"lightning.SHARDED_CHECKPOINT_METADATA ({SHARDED_CHECKPOINT_METADATA!r})")
    assert path.is_dir() and (path / SHARDED_CHECKPOINT_METADATA).is_file(), f"{sorted(path.iterdir())}: {message}"
    assert torch.load(path / SHARDED_CHECKPOINT_METADATA, weights_only=True)["global_step"] == 3, message
    assert any(f.name != SHARDED_CHECKPOINT_METADATA for f in path.iterdir()), "the shards are beside it"


@pytest.mark.parametrize(
    ("path", "local"),
    [
        ("/tmp/a.ckpt", True),
        ("rel/a.ckpt", True),
        ("file:///tmp/a.ckpt", True),
        ("s3://b/a.ckpt", False),
        ("memory://a.ckpt", False),
        ("gs://b/a.ckpt", False),
    ],
)
def test_local_paths_are_told_from_remote_ones(path, local):
    assert is_local_path(path) is local, UPGRADE.format("lightning.is_local_path")


def test_a_transformers_model_names_its_decoder_layers_as_not_to_split(tiny_model):
    """The tiny Qwen3-MoE names its decoder-layer class, which the model holds one of per layer (what FSDP2
    shards one by one); a plain torch module names none."""
    classes = no_split_module_classes(tiny_model)
    message = UPGRADE.format("transformers.no_split_module_classes")
    assert classes == {"Qwen3MoeDecoderLayer"}, f"{classes}: {message}"
    layers = [m for m in tiny_model.modules() if type(m).__name__ in classes]
    assert len(layers) == tiny_model.config.num_hidden_layers, message
    assert no_split_module_classes(nn.Linear(2, 2)) == set()


def test_killing_a_process_pool_ends_its_hung_workers_at_once():
    """Workers stuck in a task (here asleep for a minute; a hung math-verify call in ``MathVerifier``) are
    killed, their tasks fail, and the pool shuts down without waiting for them."""
    pool = ProcessPoolExecutor(2, mp_context=mp.get_context("forkserver"))
    try:
        futures = [pool.submit(time.sleep, 60) for _ in range(2)]
        if not hasattr(pool, "kill_workers"):  # Python < 3.14: the private table of worker processes
            processes = pool._processes
            assert isinstance(processes, dict) and len(processes) == 2, UPGRADE.format("process_pool.kill_workers")
            assert all(isinstance(p, mp.process.BaseProcess) for p in processes.values())
            workers = list(processes.values())
        start = time.monotonic()
        kill_workers(pool)
        if not hasattr(pool, "kill_workers"):
            for worker in workers:
                worker.join(10)
                # Gone, not asleep: the exit code alone cannot say (a forkserver child's comes through the
                # forkserver, and reads 255 where that channel closed first: seen once in the full suite).
                with pytest.raises(ProcessLookupError):
                    os.kill(worker.pid, 0)
                assert worker.exitcode in (-signal.SIGKILL, 255), f"exit code {worker.exitcode}"
        pool.shutdown(cancel_futures=True)
        assert time.monotonic() - start < 10
        for future in futures:
            with pytest.raises(BrokenProcessPool):
                future.result(timeout=10)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
