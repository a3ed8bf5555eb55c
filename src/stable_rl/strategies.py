"""FSDP2Strategy: Lightning's ModelParallelStrategy as plain FSDP2 data parallelism, with atomic checkpoints."""

import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.pytorch.strategies import ModelParallelStrategy

from stable_rl.checkpoint_io import fsync, replace_directory
from stable_rl.compat.lightning import (
    SHARDED_CHECKPOINT_METADATA,
    saves_distributed_checkpoint,
    set_data_parallel_size,
)


class FSDP2Strategy(ModelParallelStrategy):
    """Every process is a data-parallel one (``data_parallel_size`` = devices x nodes, no tensor
    parallelism): the policy's weights, gradients and optimizer state are sharded over all of them with
    FSDP2 (``stable_rl.policy.sharding``); each process rolls out its share of the prompts (with its own engine,
    or one shared by the processes of a tensor-parallel vLLM group).

    Args:
        save_distributed_checkpoint: True: a checkpoint is a directory with one shard file per process,
            written beside the target (``.<name>.partial``) and swapped with it atomically, so a process
            killed mid-save leaves the previous checkpoint whole. False: full weights and optimizer state are
            gathered into one file on rank 0, saved by the trainer's ``CheckpointIO`` (atomic by default).
        process_group_backend: as in ``ModelParallelStrategy``.
        timeout: as in ``ModelParallelStrategy``.
    """

    def __init__(
        self,
        save_distributed_checkpoint: bool = True,
        process_group_backend: str | None = None,
        timeout: timedelta | None = default_pg_timeout,
    ) -> None:
        super().__init__("auto", 1, save_distributed_checkpoint, process_group_backend, timeout)

    def setup_environment(self) -> None:
        set_data_parallel_size(self, self.num_nodes * self.num_processes)
        super().setup_environment()

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath, storage_options: Any | None = None) -> None:
        if not saves_distributed_checkpoint(self):
            return super().save_checkpoint(checkpoint, filepath, storage_options)
        target = Path(str(self.broadcast(filepath)).removeprefix("file://"))
        staging = target.with_name(f".{target.name}.partial")
        if self.global_rank == 0:
            shutil.rmtree(staging, ignore_errors=True)  # left by a kill mid-save
        self.barrier()
        super().save_checkpoint(checkpoint, staging, storage_options)  # shards fsynced by torch's writer
        self.barrier()
        if self.global_rank == 0:
            fsync(staging / SHARDED_CHECKPOINT_METADATA)
            replace_directory(staging, target)
        self.barrier()
