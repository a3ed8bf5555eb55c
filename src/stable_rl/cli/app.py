"""``stable-rl``: LightningCLI over the PolicyModule and RolloutDataModule.

stable-rl fit --config recipes/minirl.yaml --config recipes/quickstart.yaml
stable-rl fit --config recipes/minirl.yaml --config recipes/paper/grpo.yaml
"""

import sys
import warnings
from contextlib import nullcontext
from pathlib import Path

import yaml
from lightning import LightningDataModule, LightningModule
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from stable_rl import StableRLWarning
from stable_rl.callbacks.progress_bar import replace_default_bar
from stable_rl.callbacks.run_identity import RunIdentity
from stable_rl.callbacks.termination_checkpoint import EXIT_TERMINATED, TerminationCheckpoint
from stable_rl.cli.components import check_components
from stable_rl.cli.config_syntax import config_files, syntax_error
from stable_rl.cli.console_log import ConsoleLog, log_target, quiet_lightning_info, wanted
from stable_rl.cli.help import StableRLArgumentParser
from stable_rl.cli.renamed_settings import renamed_setting
from stable_rl.cli.resume import (
    changed_settings,
    check_checkpoint_file,
    finished,
    is_local_file,
    read_checkpoint,
    resolve_last_checkpoint,
    run_settings,
)
from stable_rl.cli.run_lock import held_run_folder
from stable_rl.cli.run_log import keep_history

# Lightning 2.6 warns on every step checkpoint under manual optimization that the state saved is the
# one after the update: exactly what a resumed run needs (step k's weights with global_step k).
warnings.filterwarnings("ignore", "Using ModelCheckpoint with manual optimization", UserWarning)
# vLLM initialises torch.distributed in this process (a world of one), so Lightning asks for sync_dist on
# epoch-level logs; the validation metrics are torchmetrics, already reduced across ranks by compute().
warnings.filterwarnings("ignore", r"It is recommended to use `self.log\('val/")


class StableRLCLI(LightningCLI):
    """LightningCLI that names a config file's YAML syntax error with its file and line, resolves
    ``--ckpt_path=last`` to the run's own newest ``last`` checkpoint (and logs the resumed run into that version),
    holds the run's folder for the run alone, keeps a resumed run's earlier ``metrics.csv`` rows, trains nothing (and says so) when the checkpoint's run is
    finished, gives every run a ``TerminationCheckpoint`` and a progress bar counting steps, links the model
    directory the data module shares with the policy, and, given a ``ConsoleLog``, sends what is not for the
    terminal into the run's ``console.log`` from the start of the fit."""

    def __init__(self, *args, console_log: ConsoleLog | None = None, **kwargs) -> None:
        self.console_log = console_log
        self.finished: str | None = None  # why the resumed run has nothing to train
        self.settings: dict = {}  # the run's identity, kept in its checkpoints (``RunIdentity``)
        super().__init__(*args, **kwargs)

    def add_arguments_to_parser(self, parser) -> None:
        """The policy's model directory is set once, under ``model``, and handed to ``data`` (its tokenizer, and
        the engine's model). The batch sizes are the data module's alone: every batch carries its plan."""
        parser.link_arguments("model.init_args.model_path", "data.init_args.model_path")
        parser.with_components = True  # its --help lists stable-rl's settings too (``stable_rl.cli.help``)

    def parse_arguments(self, parser, args) -> None:
        if args is None or isinstance(args, list):
            given = sys.argv[1:] if args is None else args
            configs = list(config_files(given))
            for path in configs:
                if (error := syntax_error(path)) is not None:
                    parser.error(error)
            if (renamed := renamed_setting(given, configs)) is not None:
                parser.error(renamed)
        super().parse_arguments(parser, args)

    def before_instantiate_classes(self) -> None:
        check_components(self.config[self.subcommand] if self.subcommand else self.config)
        if self.subcommand == "fit":
            config = self.config.fit
            self.settings = run_settings(yaml.safe_load(self.parser.dump(self.config, skip_link_targets=False))["fit"])
            resolve_last_checkpoint(config, self.settings)
            check_checkpoint_file(config.get("ckpt_path"))
            if is_local_file(config.get("ckpt_path")):
                checkpoint = read_checkpoint(config.ckpt_path)
                if (changes := changed_settings(checkpoint, config.ckpt_path, self.settings)) is not None:
                    rank_zero_warn(changes, category=StableRLWarning)
                self.finished = finished(checkpoint, config.ckpt_path, config.trainer.max_steps)

    def _parse_ckpt_path(self) -> None:
        """Lightning's loads the checkpoint while it parses and parses its saved hyper-parameters over the command
        line and config: the settings a resumed run was given were replaced silently, and a bad file failed there
        (torch's bare ``EOFError``). Here the run's settings apply (``before_instantiate_classes`` names the
        changed ones) and the file is checked by ``stable_rl.cli.resume``."""

    def before_fit(self) -> None:
        if self.finished is not None:
            return
        if not self.model.automatic_optimization:  # RL updates (PolicyModule); SFT uses Lightning's own
            check_trainer_settings(self.trainer)
        if not any(isinstance(c, TerminationCheckpoint) for c in self.trainer.callbacks):
            self.trainer.callbacks.append(TerminationCheckpoint())
        self.trainer.callbacks.append(RunIdentity(self.settings))
        replace_default_bar(self.trainer.callbacks)

    def fit(self, model, **kwargs) -> None:
        """Lightning's fit, unless the checkpoint's run is finished already (then it says so), with the run's folder
        held by this run alone (the logger's folder, by rank 0, which writes the logs)."""
        if self.finished is not None:
            rank_zero_warn(self.finished, category=StableRLWarning)
            return
        folder = self.trainer.log_dir if self.trainer.loggers and self.trainer.global_rank == 0 else None
        with held_run_folder(Path(folder)) if folder is not None else nullcontext():
            if self.config.fit.get("ckpt_path") is not None and self.trainer.global_rank == 0:
                keep_history(self.trainer.loggers)
            if self.console_log is not None and (target := log_target(self.trainer)) is not None:
                for logger in self.trainer.loggers:  # each makes its folder before console.log is written into it
                    logger.experiment  # noqa: B018 (CSVLogger would warn that a new version's folder "is not empty")
                self.console_log.start(*target)
            self.trainer.fit(model, **kwargs)


def check_trainer_settings(trainer) -> None:
    """Trainer settings of automatic optimization, which the RL module's updates (several per rollout, by
    hand) replace: named with their stable-rl setting, where Lightning would suggest automatic optimization
    (SFT, which optimizes automatically, keeps them)."""
    if getattr(trainer, "gradient_clip_val", None):
        raise ValueError(
            f"trainer.gradient_clip_val={trainer.gradient_clip_val}: stable-rl clips each of its updates itself: "
            "remove it and set model.init_args.max_grad_norm"
        )
    if getattr(trainer, "accumulate_grad_batches", 1) not in (None, 1):
        raise ValueError(
            f"trainer.accumulate_grad_batches={trainer.accumulate_grad_batches}: stable-rl accumulates gradients "
            "over micro-batches itself: remove it and set data.init_args.micro_batch_size (memory) or "
            "mini_batch_size (responses per update)"
        )


def main(args: list[str] | None = None, run: bool = True, console_log: ConsoleLog | None = None) -> LightningCLI:
    """Run the CLI; ``args`` replaces ``sys.argv[1:]``; ``run=False`` only builds the objects; ``console_log``
    takes the lines not meant for the terminal (``stable_rl.cli.console_log``)."""
    return StableRLCLI(
        LightningModule,
        LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        parser_class=StableRLArgumentParser,
        save_config_kwargs={"overwrite": True},
        # checkpoints written beside their target, fsynced and renamed (``stable_rl.checkpoint_io``)
        trainer_defaults={"plugins": [{"class_path": "stable_rl.checkpoint_io.AtomicCheckpointIO"}]},
        args=args,
        run=run,
        console_log=console_log,
    )


def console() -> None:
    """The ``stable-rl`` console script: exit status 0 on success, 143 when terminated (SIGTERM) after
    keeping a checkpoint to resume from. The terminal shows the progress bar, stable-rl's warnings and the
    summary; the rest is in the run's ``console.log`` (``STABLE_RL_VERBOSE=1``: all on the terminal)."""
    log = ConsoleLog() if wanted() else None
    if log is not None:
        quiet_lightning_info()
    try:
        main(console_log=log)
    except SIGTERMException:
        raise SystemExit(EXIT_TERMINATED) from None
    finally:
        if log is not None and log.active:
            log.stop()  # before an error's traceback is printed
            print(f"log: {log.path}")
