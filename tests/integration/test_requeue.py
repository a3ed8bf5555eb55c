"""Resuming through the CLI (``--ckpt_path``), with the HF engine on the tiny model: the run's log survives, a
finished run says so, a run resumes its own checkpoint with the settings it is given, and a run folder is held by
one run at a time."""

import csv
import shutil
from pathlib import Path

import pytest
import quickstart_stack
import torch

from stable_rl.cli import main
from stable_rl.cli.run_lock import held_run_folder

REPO = Path(__file__).resolve().parents[2]
CHECKPOINT_EVERY_STEP = (
    "--trainer.callbacks=[{class_path: lightning.pytorch.callbacks.ModelCheckpoint, "
    "init_args: {save_last: true, every_n_train_steps: 1}}]"
)
SMALL = [
    "--data.init_args.engine=stable_rl.rollout.HFEngine",
    "--data.init_args.engine.init_args.max_new_tokens=4",
    "--data.init_args.prompts_per_step=2",
    "--data.init_args.group_size=2",
    "--data.init_args.prompts.init_args.size=8",
    "--data.init_args.eval_sets={}",
    "--trainer.limit_val_batches=0",
    "--trainer.enable_progress_bar=false",
    CHECKPOINT_EVERY_STEP,
]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty"),  # a resumed run's own
    pytest.mark.filterwarnings("ignore:The dirpath has changed"),  # the run was copied from the fixture's folder
]


@pytest.fixture(autouse=True)
def in_repo(monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setattr("sys.argv", ["stable-rl"])


def fit(save_dir: Path, *extra: str):
    return main(["fit", *quickstart_stack.CONFIGS, *SMALL, f"--trainer.logger.init_args.save_dir={save_dir}", *extra])


def steps(run: Path) -> list[int]:
    with open(run / "metrics.csv") as file:
        return [int(row["step"]) for row in csv.DictReader(file)]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A run of 2 steps (its save_dir), checkpointed after each."""
    save_dir = tmp_path_factory.mktemp("finished")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(REPO)
        patch.setattr("sys.argv", ["stable-rl"])
        fit(save_dir, "--trainer.max_steps=2")
    return save_dir


@pytest.fixture
def run(finished_run, tmp_path) -> Path:
    """A copy of the finished run's save_dir."""
    shutil.copytree(finished_run, tmp_path, dirs_exist_ok=True)
    return tmp_path


def test_a_requeued_run_keeps_its_earlier_steps_in_metrics_csv(run):
    version = run / "quickstart" / "version_0"
    assert steps(version) == [0, 1]
    fit(run, "--trainer.max_steps=3", "--ckpt_path=last")
    assert steps(version) == [0, 1, 2]
    assert sorted(p.name for p in version.parent.iterdir()) == ["version_0"]


def test_a_requeued_finished_run_says_so_and_changes_nothing(run):
    version = run / "quickstart" / "version_0"
    before = {p: p.read_bytes() for p in version.rglob("*") if p.is_file()}
    last = version / "checkpoints" / "last.ckpt"
    with pytest.warns(UserWarning) as warned:
        fit(run, "--trainer.max_steps=2", "--ckpt_path=last")
    assert [str(w.message) for w in warned] == [
        f"the run is finished: its checkpoint {last} is at step 2 of trainer.max_steps=2, so there is nothing to "
        "train (nothing was written). To train on, raise --trainer.max_steps"
    ]
    assert {p: p.read_bytes() for p in version.rglob("*") if p.is_file()} == before
    assert torch.load(last, weights_only=True, mmap=True)["global_step"] == 2


def test_a_requeued_run_resumes_its_own_checkpoint_not_a_newer_one_of_another_run_of_that_name(run):
    """An lr sweep that kept the logger's name: the other run's newer last.ckpt and log are left alone."""
    fit(run, "--trainer.max_steps=2", "--model.init_args.optimizer.init_args.lr=3e-4")
    other = run / "quickstart" / "version_1"
    other_last = (other / "checkpoints" / "last.ckpt").read_bytes()
    fit(run, "--trainer.max_steps=3", "--ckpt_path=last")
    assert steps(run / "quickstart" / "version_0") == [0, 1, 2]
    assert steps(other) == [0, 1]
    assert (other / "checkpoints" / "last.ckpt").read_bytes() == other_last


def test_settings_given_on_resume_apply_and_are_named(run):
    """Lightning's CLI parsed the checkpoint's saved hyper-parameters over them."""
    last = run / "quickstart" / "version_0" / "checkpoints" / "last.ckpt"
    given = ["--model.init_args.max_grad_norm=0.5", "--model.init_args.max_nonfinite_updates=5"]
    with pytest.warns(UserWarning) as warned:
        cli = fit(run, "--trainer.max_steps=3", f"--ckpt_path={last}", *given, "--data.init_args.micro_batch_size=1")
    assert (cli.model.max_grad_norm, cli.model.max_nonfinite_updates, cli.datamodule.micro_batch_size) == (0.5, 5, 1)
    assert cli.trainer.global_step == 3
    assert f"resumed {last} with this run's settings (checkpoint -> this run): " + "; ".join(
        [
            "data.init_args.micro_batch_size: 64 -> 1",
            "model.init_args.max_grad_norm: 1.0 -> 0.5",
            "model.init_args.max_nonfinite_updates: 3 -> 5",
        ]
    ) in [str(w.message) for w in warned]


def model_path_named():
    return pytest.warns(UserWarning, match="model.init_args.model_path: 'data/tiny-qwen3-moe-sft-format' -> ")


def test_a_bad_or_other_model_path_given_on_resume_is_named(run, tiny_dense_path):
    """The checks of the model directory and of the checkpoint's model are reached (the checkpoint's saved
    model_path replaced the one given)."""
    last = run / "quickstart" / "version_0" / "checkpoints" / "last.ckpt"
    resume = ["--trainer.max_steps=3", f"--ckpt_path={last}"]
    with (
        pytest.raises(FileNotFoundError, match=r"^model directory models/nope not found: there is no"),
        model_path_named(),
    ):
        fit(run, *resume, "--model.init_args.model_path=models/nope")
    other = r"^the checkpoint holds another model \(trained from data/tiny-qwen3-moe-sft-format"
    with pytest.raises(ValueError, match=other), model_path_named():
        fit(run, *resume, f"--model.init_args.model_path={tiny_dense_path}")


def test_a_run_folder_in_use_by_another_run_is_refused_before_anything_is_written(tmp_path):
    """Two runs started at once into one version folder (here the other holds it already)."""
    folder = tmp_path / "quickstart" / "version_0"
    with held_run_folder(folder), pytest.raises(RuntimeError, match=f"^run folder {folder} is in use by another run"):
        fit(tmp_path, "--trainer.max_steps=1", "--trainer.logger.init_args.version=0")
    assert not folder.exists()
    fit(tmp_path, "--trainer.max_steps=1", "--trainer.logger.init_args.version=0")  # once the other has ended
    assert sorted(p.name for p in folder.parent.iterdir()) == ["version_0"]  # the lock file went with the run
