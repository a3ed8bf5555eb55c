"""``--ckpt_path=last``: the run's newest ``last`` checkpoint, across its logger's versions."""

import os

import pytest
import torch
from jsonargparse import Namespace

from stable_rl.cli.resume import MACHINE_SETTINGS, differences, resolve_last_checkpoint, run_settings


def config(save_dir, version=None, ckpt_path="last"):
    init = Namespace(save_dir=str(save_dir), name="run", version=version)
    logger = Namespace(class_path="lightning.pytorch.loggers.CSVLogger", init_args=init)
    return Namespace(ckpt_path=ckpt_path, trainer=Namespace(logger=logger))


def checkpoint(root, version, name, mtime, settings=None):
    """An empty file, or one holding ``RunIdentity``'s ``settings``."""
    path = root / "run" / f"version_{version}" / "checkpoints" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    if settings is not None:
        torch.save({"global_step": 2, "callbacks": {"RunIdentity": {"settings": settings}}}, path)
    os.utime(path, (mtime, mtime))
    return path


def test_the_newest_last_checkpoint_of_any_version_and_that_version_for_the_log(tmp_path):
    checkpoint(tmp_path, 0, "last.ckpt", 100)
    newest = checkpoint(tmp_path, 2, "last.ckpt", 300)
    checkpoint(tmp_path, 1, "last.ckpt", 200)
    checkpoint(tmp_path, 3, "step=9.ckpt", 400)  # not a last checkpoint
    resolved = config(tmp_path)
    resolve_last_checkpoint(resolved, {})
    assert (resolved.ckpt_path, resolved.trainer.logger.init_args.version) == (str(newest), 2)


def test_a_set_version_is_searched_alone(tmp_path):
    mine = checkpoint(tmp_path, 1, "last.ckpt", 100)
    checkpoint(tmp_path, 2, "last.ckpt", 300)
    resolved = config(tmp_path, version=1)
    resolve_last_checkpoint(resolved, {})
    assert (resolved.ckpt_path, resolved.trainer.logger.init_args.version) == (str(mine), 1)


def test_nothing_to_resume_or_another_ckpt_path_is_left_to_lightning(tmp_path):
    fresh = config(tmp_path)  # a requeued run's first start: Lightning warns and starts at step 0
    resolve_last_checkpoint(fresh, {})
    assert (fresh.ckpt_path, fresh.trainer.logger.init_args.version) == ("last", None)
    checkpoint(tmp_path, 0, "last.ckpt", 100)
    explicit = config(tmp_path, ckpt_path="some/where.ckpt")
    resolve_last_checkpoint(explicit, {})
    assert explicit.ckpt_path == "some/where.ckpt"


LR = "model.init_args.optimizer.init_args.lr"


def test_another_runs_newer_checkpoint_is_passed_over_for_this_runs_own(tmp_path):
    """Two runs of an lr sweep that kept the logger's name: each resumes its own checkpoint."""
    mine = checkpoint(tmp_path, 0, "last.ckpt", 100, {LR: 1e-4, "seed_everything": 0})
    checkpoint(tmp_path, 1, "last.ckpt", 200, {LR: 3e-4, "seed_everything": 0})
    resolved = config(tmp_path)
    resolve_last_checkpoint(resolved, {LR: 1e-4, "seed_everything": 0, "a.setting.added.since": 1})
    assert (resolved.ckpt_path, resolved.trainer.logger.init_args.version) == (str(mine), 0)


def test_only_other_runs_checkpoints_are_refused_naming_both(tmp_path):
    other = checkpoint(tmp_path, 0, "last.ckpt", 100, {LR: 3e-4, "seed_everything": 0})
    message = (
        f"--ckpt_path=last: the checkpoints under {tmp_path / 'run'} are other runs', not this one's: the newest, "
        f"{other}, was trained with other settings (that run -> this run: {LR}: 0.0003 -> 0.0001). Runs that share "
        "trainer.logger.init_args.save_dir and name resume each other's checkpoints: give this run its own "
        f"trainer.logger.init_args.name, or pass --ckpt_path={other} to resume that checkpoint with this run's settings"
    )
    with pytest.raises(ValueError) as refused:
        resolve_last_checkpoint(config(tmp_path), {LR: 1e-4, "seed_everything": 0})
    assert str(refused.value) == message


def test_a_run_s_identity_is_its_config_less_what_a_requeue_changes():
    """Less where it is and writes (its folders, its logger's name, its checkpoints' dirpath) and how long it runs;
    components in a list by index. Its memory and speed switches are kept, to be named when changed, but two runs
    that differ only there are one run (an out-of-memory requeue with a smaller micro-batch)."""
    dump = {
        "seed_everything": 0,
        "ckpt_path": "last",
        "config": ["recipes/minirl.yaml"],
        "trainer": {
            "max_steps": 200,
            "logger": {"init_args": {"version": 3, "name": "minirl"}},
            "callbacks": [
                {"class_path": "ModelCheckpoint", "init_args": {"dirpath": "ckpt/a", "every_n_train_steps": 1}}
            ],
            "plugins": [],
        },
        "model": {"init_args": {"optimizer": {"init_args": {"lr": 1e-4}}, "runtime": {"init_args": {"compile": True}}}},
        "data": {
            "init_args": {"eval_sets": {}, "micro_batch_size": 8, "engine": {"init_args": {"max_new_tokens": 64}}}
        },
    }
    assert run_settings(dump) == {
        "seed_everything": 0,
        "model.init_args.runtime.init_args.compile": True,
        "data.init_args.micro_batch_size": 8,
        "trainer.callbacks[0].class_path": "ModelCheckpoint",
        "trainer.callbacks[0].init_args.every_n_train_steps": 1,
        "trainer.plugins": [],
        LR: 1e-4,
        "data.init_args.eval_sets": {},
        "data.init_args.engine.init_args.max_new_tokens": 64,
    }


def test_runs_that_differ_only_in_memory_and_speed_switches_are_one_run():
    saved = {"data.init_args.micro_batch_size": 64, "model.init_args.runtime.init_args.compile": True, LR: 1e-4}
    mine = {"data.init_args.micro_batch_size": 8, "model.init_args.runtime.init_args.compile": False, LR: 1e-4}
    assert differences(saved, mine, MACHINE_SETTINGS) == []
    assert differences(saved, mine) == [
        "data.init_args.micro_batch_size: 64 -> 8",
        "model.init_args.runtime.init_args.compile: True -> False",
    ]
