"""The terminal of ``stable-rl fit``: a progress bar counting steps, and every line not meant for the terminal
in the run's ``console.log``."""

import logging
import os
import sys
import warnings
from types import SimpleNamespace

import lightning as L
from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar
from lightning.pytorch.demos.boring_classes import BoringModel

from stable_rl import StableRLWarning
from stable_rl.callbacks.progress_bar import StepProgressBar, replace_default_bar
from stable_rl.cli.console_log import LOG_DIR, ConsoleLog, log_target


def test_the_log_takes_every_stream_and_the_terminal_keeps_stable_rls_warnings(tmp_path, capfd):
    vllm = logging.getLogger("vllm")
    vllm_handlers, vllm_propagate = list(vllm.handlers), vllm.propagate  # vLLM's own, if another test imported it
    log = ConsoleLog()
    log.start(tmp_path / "run" / "console.log")
    try:
        os.write(2, b"from C++\n")
        print("from python", file=sys.stderr)
        print("saving to [/tmp/x]", end="", file=sys.stderr)  # rich would read the brackets as markup
        sys.stderr.flush()
        logging.getLogger("vllm.engine").warning("from vllm")
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("from a library", DeprecationWarning, stacklevel=1)
            warnings.warn("reward below half its best", StableRLWarning, stacklevel=1)
    finally:
        log.stop()
    print("after", file=sys.stderr)

    text = (tmp_path / "run" / "console.log").read_text()
    for line in (
        "from C++",
        "from python",
        "saving to [/tmp/x]",
        "WARNING vllm.engine: from vllm",
        "DeprecationWarning: from a library",
    ):
        assert line in text, text
    assert "StableRLWarning: reward below half its best" in text
    assert capfd.readouterr() == ("warning: reward below half its best\n", "after\n")  # (stdout, stderr)
    assert (vllm.handlers, vllm.propagate, log.active) == (vllm_handlers, vllm_propagate, False)


def test_the_bar_says_training_not_epoch_0_of_minus_2(tmp_path):
    bar = StepProgressBar()
    trainer = L.Trainer(
        max_steps=2,
        callbacks=[bar],
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(BoringModel())
    assert [task.description for task in bar.progress.tasks] == ["Training  "]  # as wide as "Validation"


def test_only_lightnings_default_bar_is_replaced():
    mine = type("MyBar", (RichProgressBar,), {})()
    callbacks = [RichProgressBar(), mine, TQDMProgressBar()]
    replace_default_bar(callbacks)
    assert [type(c) for c in callbacks] == [StepProgressBar, type(mine), TQDMProgressBar]


def test_rank_0_logs_in_the_run_directory_and_the_processes_it_starts_beside_it(tmp_path, monkeypatch):
    monkeypatch.setenv(LOG_DIR, "")  # none inherited; restored after the test
    run = tmp_path / "quickstart" / "version_0"
    assert log_target(SimpleNamespace(global_rank=1, log_dir=str(tmp_path / "other"), default_root_dir=".")) is None
    rank_0 = SimpleNamespace(global_rank=0, log_dir=str(run), default_root_dir=".")
    assert log_target(rank_0) == (run / "console.log", 2)
    child = SimpleNamespace(global_rank=1, log_dir=str(tmp_path / "quickstart" / "version_1"), default_root_dir=".")
    # inherited: not the version its own logger would pick; its fd 2 is rank 0's log, its terminal fd 1
    assert log_target(child) == (run / "console-rank1.log", 1)
