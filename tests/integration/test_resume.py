"""Exact resume: a run stopped at step j and resumed from its checkpoint logs the same metrics for
the remaining steps, and ends with the same weights, as a run that never stopped (float32, CPU)."""

import csv
from pathlib import Path

import pytest
import quickstart_stack
import torch

from stable_rl.cli import main

REPO = Path(__file__).resolve().parents[2]
STEPS = 5
RUN = [
    "fit",
    *quickstart_stack.CONFIGS,
    f"--trainer.max_steps={STEPS}",
    "--trainer.enable_progress_bar=false",
    "--trainer.val_check_interval=2",
    "--trainer.limit_val_batches=1",
    "--model.init_args.optimizer.init_args.lr=1e-3",  # updates that move the log-probs
    "--data.init_args.prompts_per_step=2",
    "--data.init_args.group_size=2",
    "--data.init_args.prompts.init_args.size=6",  # 3 global steps per epoch: resumes cross an epoch end
    "--data.init_args.engine.init_args.max_new_tokens=24",  # room for an answer: accuracies differ
    "--data.init_args.eval_samples=4",  # the recipes keep the best val/heldout/avg@4
    "--data.init_args.eval_prompts_per_batch=2",
]
ENGINES = {
    "vllm": [],
    "vllm-one-seed-per-call": ["--data.init_args.engine.init_args.request_seeds=false"],  # the GPU default
    "hf": ["--data.init_args.engine=stable_rl.rollout.HFEngine", "--data.init_args.engine.init_args.max_new_tokens=24"],
}

pytestmark = [
    pytest.mark.slow,
    # a resumed run logs to a new version directory, so the recipe's ModelCheckpoint says its dirpath changed
    pytest.mark.filterwarnings("ignore:The dirpath has changed"),
]


@pytest.fixture(autouse=True)
def in_repo(monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setattr("sys.argv", ["stable-rl"])


def fit(tmp_path: Path, name: str, engine: list[str], *extra: str):
    callbacks = [
        "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
        f"--trainer.callbacks.dirpath={tmp_path / 'ckpt' / name}",
        "--trainer.callbacks.every_n_train_steps=1",
        "--trainer.callbacks.save_top_k=-1",
        "--trainer.callbacks.filename={step}",
    ]
    cli = main(
        [
            *RUN,
            *engine,
            f"--trainer.logger.init_args.save_dir={tmp_path}",
            f"--trainer.logger.init_args.name={name}",
            *callbacks,
            *extra,
        ]
    )
    with open(next((tmp_path / name).glob("version_*/metrics.csv"))) as f:
        rows = [{k: v for k, v in row.items() if v} for row in csv.DictReader(f)]
    return cli, rows


def by_step(rows, first: int) -> dict:
    """Training rows keyed by the rollout's policy version, validation rows by their step."""
    out = {}
    for row in rows:
        key = ("train", row["train/policy_version"]) if "train/policy_version" in row else ("val", row["step"])
        if float(key[1]) >= first:
            out[key] = {k: v for k, v in row.items() if k != "epoch" and not k.startswith("time/")}  # wall times differ
    return out


@pytest.mark.parametrize("engine", ENGINES)
def test_resumed_run_equals_the_run_that_never_stopped(engine, tmp_path):
    if engine.startswith("vllm"):
        pytest.importorskip("vllm")
    whole, whole_rows = fit(tmp_path, "whole", ENGINES[engine])
    accuracy = {int(r["step"]): float(r["val/heldout/avg@4"]) for r in whole_rows if "val/heldout/avg@4" in r}
    assert len(set(accuracy.values())) > 1, accuracy  # a best to find
    del accuracy[0]  # the weights before training are not checkpointed (Lightning saves after updates)
    step, best = max(accuracy.items(), key=lambda item: (item[1], -item[0]))  # the first of the best
    assert [p.name for p in (tmp_path / "whole").glob("version_0/checkpoints/best-*")] == [
        f"best-step={step + 1}-avg4={best:.3f}.ckpt"  # a validation's CSV row carries the step before it
    ]
    for stop in (2, 3):  # mid-epoch, and at the end of the first epoch (3 steps of 2 of 6 problems)
        name = f"resumed{stop}"
        ckpt = tmp_path / "ckpt" / "whole" / f"step={stop}.ckpt"
        resumed, resumed_rows = fit(tmp_path, name, ENGINES[engine], f"--ckpt_path={ckpt}")
        assert resumed.trainer.global_step == STEPS
        expected, got = by_step(whole_rows, stop), by_step(resumed_rows, stop)
        assert sum(k[0] == "train" for k in got) == STEPS - stop and any(k[0] == "val" for k in got)
        assert got == expected
        weights = resumed.model.policy.state_dict()
        for key, value in whole.model.policy.state_dict().items():
            assert torch.equal(value, weights[key]), key
