"""What ``stable-rl fit --ckpt_path`` checks before anything is built: which checkpoint ``last`` means (the run's
own: its settings, kept by ``RunIdentity``, are this run's), that the file is one, and whether the run it holds is
finished already."""

from pathlib import Path

import torch
from jsonargparse import Namespace

from stable_rl.compat.lightning import SHARDED_CHECKPOINT_METADATA

LIGHTNING_PATHS = ("last", "hpc", "best", "registry")  # ckpt_path values Lightning resolves itself
RESUME_SETTINGS = (  # where the run is and writes, and what a requeue or a longer run changes: not kept with it
    "config",
    "ckpt_path",
    "trainer.default_root_dir",
    "trainer.logger.init_args.save_dir",
    "trainer.logger.init_args.name",
    "trainer.max_steps",
    "trainer.max_epochs",
    "trainer.max_time",
    "trainer.logger.init_args.version",
    "trainer.enable_progress_bar",
)
MACHINE_SETTINGS = (  # how it uses the machine: kept and named when changed, but not its identity (an out-of-memory
    # requeue with a smaller micro-batch, or compilation switched off, is still the run)
    "data.init_args.micro_batch_size",
    "data.init_args.engine.init_args.gpu_memory_utilization",
    "data.init_args.engine.init_args.kv_cache_memory_bytes",
    "model.init_args.runtime",
)


def run_settings(config: dict, prefix: str = "") -> dict:
    """A run's identity: its config (a plain dump of the fit's settings) by dotted name, lists of components by
    index (``trainer.callbacks[2].init_args.monitor``), less ``RESUME_SETTINGS`` and every checkpoint folder
    (``...dirpath``): where the run writes is not what it is."""
    settings = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if name in RESUME_SETTINGS or name.endswith(".dirpath"):
            continue
        if isinstance(value, dict) and value:
            settings.update(run_settings(value, f"{name}."))
        elif isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
            for index, item in enumerate(value):
                settings.update(run_settings(item, f"{name}[{index}]."))
        else:
            settings[name] = value
    return settings


def recorded_settings(ckpt_path: Path) -> dict | None:
    """The settings ``RunIdentity`` kept in a checkpoint; None where it kept none or the file cannot be read (the
    checks of the chosen file name that)."""
    try:
        checkpoint = read_checkpoint(str(ckpt_path))
    except Exception:
        return None
    return checkpoint.get("callbacks", {}).get("RunIdentity", {}).get("settings")


def differences(saved: dict, mine: dict, leave_out: tuple[str, ...] = ()) -> list[str]:
    """The settings both name that differ, as "name: saved -> mine", less those under a name in ``leave_out``."""
    return [
        f"{k}: {saved[k]!r} -> {mine[k]!r}"
        for k in sorted(saved.keys() & mine.keys())
        if saved[k] != mine[k] and not any(k == n or k.startswith(f"{n}.") for n in leave_out)
    ]


def resolve_last_checkpoint(config, settings: dict) -> None:
    """``ckpt_path: last`` with a logger that numbers versions: Lightning looks for ``last.ckpt`` only in the
    new version the logger is about to open, finds none and trains from step 0. Point it instead at the
    newest ``<save_dir>/<name>/version_*/checkpoints/last*.ckpt`` of this run (its ``settings``, or none kept) and
    log into that version; with none there (a requeued run's first start) the run starts fresh, as Lightning
    does. Only other runs' checkpoints there (runs that share the logger's folder and name) are refused."""
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
    others = []
    for path in sorted(found, key=lambda path: path.stat().st_mtime, reverse=True):
        saved = recorded_settings(path)
        if saved is not None and (changed := differences(saved, settings, MACHINE_SETTINGS)):
            others.append((path, changed))
            continue
        config.ckpt_path = str(path)
        if init.get("version") is None:
            init.version = int(path.parent.parent.name.removeprefix("version_"))
        return
    if others:
        path, changed = others[0]
        raise ValueError(
            f"--ckpt_path=last: the checkpoints under {root} are other runs', not this one's: the newest, {path}, "
            f"was trained with other settings (that run -> this run: {'; '.join(changed)}). Runs that share "
            "trainer.logger.init_args.save_dir and name resume each other's checkpoints: give this run its own "
            f"trainer.logger.init_args.name, or pass --ckpt_path={path} to resume that checkpoint with this run's "
            "settings"
        )


def is_local_file(ckpt_path: str | None) -> bool:
    """Whether ``ckpt_path`` names a local file or directory, not a word Lightning resolves or a remote URL."""
    return ckpt_path not in (None, *LIGHTNING_PATHS) and "://" not in str(ckpt_path)


def check_checkpoint_file(ckpt_path: str | None) -> None:
    """An empty or missing checkpoint file, or a directory that is no sharded checkpoint, fails here, named, not
    as torch's "Ran out of input" or "Is a directory" after the model is built."""
    if not is_local_file(ckpt_path):
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
    the weights and optimizer states); one torch cannot read is named (torch would advise ``weights_only=False``)."""
    path = Path(ckpt_path)
    if path.is_dir():
        path = path / SHARDED_CHECKPOINT_METADATA
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ValueError(
            f"checkpoint {ckpt_path} cannot be read ({reason}): a damaged file (a save or copy cut off) or not a "
            "checkpoint of stable-rl's: resume from another one, e.g. an earlier step's, or --ckpt_path=last"
        ) from None


def changed_settings(checkpoint: dict, ckpt_path: str, settings: dict) -> str | None:
    """The settings this run gives that differ from those the checkpoint was trained with: they apply."""
    saved = checkpoint.get("callbacks", {}).get("RunIdentity", {}).get("settings")
    if saved is None or not (changed := differences(saved, settings)):
        return None
    return f"resumed {ckpt_path} with this run's settings (checkpoint -> this run): {'; '.join(changed)}"


def finished(checkpoint: dict, ckpt_path: str, max_steps: int | None) -> str | None:
    """Why a run resumed from ``checkpoint`` would train nothing: it is at ``trainer.max_steps`` already."""
    step = checkpoint.get("global_step", 0)
    if max_steps is None or max_steps < 0 or step < max_steps:
        return None
    return (
        f"the run is finished: its checkpoint {ckpt_path} is at step {step} of trainer.max_steps={max_steps}, so "
        "there is nothing to train (nothing was written). To train on, raise --trainer.max_steps"
    )
