"""stable-rl-sweep: the runs it plans, their commands and log names."""

import shlex
import sys

import pytest

from stable_rl.sweep import main, plan


def test_plan_is_every_recipe_stack_with_every_seed():
    runs = plan(
        ["recipes/minirl.yaml", "recipes/minirl.yaml recipes/paper/minirl_no_is.yaml"], [0, 3], "out", ["--x=1"]
    )
    assert [run.name for run in runs] == ["minirl-s0", "minirl-s3", "minirl_no_is-s0", "minirl_no_is-s3"]
    assert runs[3].command() == [
        sys.executable,
        "-m",
        "stable_rl.cli",
        "fit",
        "--config=recipes/minirl.yaml",
        "--config=recipes/paper/minirl_no_is.yaml",
        "--seed_everything=3",
        "--trainer.logger.init_args.save_dir=out",
        "--trainer.logger.init_args.name=minirl_no_is-s3",
        "--x=1",
    ]


def test_dry_run_prints_the_commands(capsys):
    main(["--recipes", "recipes/quickstart.yaml", "--seeds", "1", "--dry-run", "--", "--trainer.max_steps=5"])
    line = capsys.readouterr().out.strip()
    assert shlex.split(line)[-4:] == [
        "--seed_everything=1",
        "--trainer.logger.init_args.save_dir=runs/sweep",
        "--trainer.logger.init_args.name=quickstart-s1",
        "--trainer.max_steps=5",
    ]


def test_a_missing_recipe_is_named():
    with pytest.raises(FileNotFoundError, match=r"\['recipes/nope.yaml'\] not found"):
        plan(["recipes/minirl.yaml recipes/nope.yaml"], [0], "out", [])
