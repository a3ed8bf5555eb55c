"""What ``stable-rl fit --ckpt_path`` checks before anything is built: which checkpoint ``last`` means, that the
file is one, and whether the run it holds is finished already."""

from pathlib import Path

import torch
from jsonargparse import Namespace

from stable_rl.compat.lightning import SHARDED_CHECKPOINT_METADATA

LIGHTNING_PATHS = ("last", "hpc", "best", "registry")  # ckpt_path values Lightning resolves itself


def resolve_last_checkpoint(config) -> None:
    """``ckpt_path: last`` with a logger that numbers versions: Lightning looks for ``last.ckpt`` only in the
    new version the logger is about to open, finds none and trains from step 0. Point it instead at the
    newest ``<save_dir>/<name>/version_*/checkpoints/last*.ckpt`` and log into that version; with none there
    (a requeued run's first start) the run starts fresh, as Lightning does."""
    logger = config.trainer.get("logger")
    init = logger.get("init_args") if isinstance(logger, Namespace) else None
    if config.get("ckpt_path") != "last" or init is None or init.get("save_dir") is None:
        return
    root = Path(init.save_dir) / (init.get("name") or "lightning_logs")
    if init.get("version") is not None:
        root = root / (init.version if isinstance(init.version, str) else f"version_{init.version}")
        found = list(root.glob("checkpoints/last*.ckpt"))
    else:
        found = list(root.glob("version_*/checkpoints/last*.ckpt"))
    if found:
        newest = max(found, key=lambda path: path.stat().st_mtime)
        config.ckpt_path = str(newest)
        if init.get("version") is None:
            init.version = int(newest.parent.parent.name.removeprefix("version_"))


def check_checkpoint_file(ckpt_path: str | None) -> None:
    """An empty or missing checkpoint file, or a directory that is no sharded checkpoint, fails here, named, not
    as torch's "Ran out of input" or "Is a directory" after the model is built."""
    if ckpt_path in (None, *LIGHTNING_PATHS) or "://" in str(ckpt_path):
        return
    path = Path(ckpt_path)
    if path.is_file() and path.stat().st_size == 0:
        raise ValueError(
            f"checkpoint {path} is empty (a save cut off by a crash or a full disk): resume from another one, "
            "e.g. an earlier step's, or --ckpt_path=last"
        )
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {path} not found: pass the path of a .ckpt file, or --ckpt_path=last")
    if path.is_dir() and not (path / SHARDED_CHECKPOINT_METADATA).is_file():
        found = sorted(path.glob("**/*.ckpt"))
        example = f", e.g. {found[-1]}" if found else ""
        raise IsADirectoryError(
            f"checkpoint {path} is a directory but not a sharded (FSDP2) checkpoint "
            f"(no {SHARDED_CHECKPOINT_METADATA} in it): "
            f"pass the path of a .ckpt file{example}, or --ckpt_path=last"
        )


def read_checkpoint(ckpt_path: str) -> dict:
    """The checkpoint's contents, its tensors mapped, not read (a sharded checkpoint: its ``meta.pt``, all but
    the weights and optimizer states)."""
    path = Path(ckpt_path)
    if path.is_dir():
        path = path / SHARDED_CHECKPOINT_METADATA
    return torch.load(path, map_location="cpu", weights_only=True, mmap=True)


def finished(checkpoint: dict, ckpt_path: str, max_steps: int | None) -> str | None:
    """Why a run resumed from ``checkpoint`` would train nothing: it is at ``trainer.max_steps`` already."""
    step = checkpoint.get("global_step", 0)
    if max_steps is None or max_steps < 0 or step < max_steps:
        return None
    return (
        f"the run is finished: its checkpoint {ckpt_path} is at step {step} of trainer.max_steps={max_steps}, so "
        "there is nothing to train (nothing was written). To train on, raise --trainer.max_steps"
    )
