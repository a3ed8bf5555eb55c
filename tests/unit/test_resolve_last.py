"""``--ckpt_path=last``: the run's newest ``last`` checkpoint, across its logger's versions."""

import os

from jsonargparse import Namespace

from stable_rl.cli.resume import resolve_last_checkpoint


def config(save_dir, version=None, ckpt_path="last"):
    init = Namespace(save_dir=str(save_dir), name="run", version=version)
    logger = Namespace(class_path="lightning.pytorch.loggers.CSVLogger", init_args=init)
    return Namespace(ckpt_path=ckpt_path, trainer=Namespace(logger=logger))


def checkpoint(root, version, name, mtime):
    path = root / "run" / f"version_{version}" / "checkpoints" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    os.utime(path, (mtime, mtime))
    return path


def test_the_newest_last_checkpoint_of_any_version_and_that_version_for_the_log(tmp_path):
    checkpoint(tmp_path, 0, "last.ckpt", 100)
    newest = checkpoint(tmp_path, 2, "last.ckpt", 300)
    checkpoint(tmp_path, 1, "last.ckpt", 200)
    checkpoint(tmp_path, 3, "step=9.ckpt", 400)  # not a last checkpoint
    resolved = config(tmp_path)
    resolve_last_checkpoint(resolved)
    assert (resolved.ckpt_path, resolved.trainer.logger.init_args.version) == (str(newest), 2)


def test_a_set_version_is_searched_alone(tmp_path):
    mine = checkpoint(tmp_path, 1, "last.ckpt", 100)
    checkpoint(tmp_path, 2, "last.ckpt", 300)
    resolved = config(tmp_path, version=1)
    resolve_last_checkpoint(resolved)
    assert (resolved.ckpt_path, resolved.trainer.logger.init_args.version) == (str(mine), 1)


def test_nothing_to_resume_or_another_ckpt_path_is_left_to_lightning(tmp_path):
    fresh = config(tmp_path)  # a requeued run's first start: Lightning warns and starts at step 0
    resolve_last_checkpoint(fresh)
    assert (fresh.ckpt_path, fresh.trainer.logger.init_args.version) == ("last", None)
    checkpoint(tmp_path, 0, "last.ckpt", 100)
    explicit = config(tmp_path, ckpt_path="some/where.ckpt")
    resolve_last_checkpoint(explicit)
    assert explicit.ckpt_path == "some/where.ckpt"
