"""Data-parallel training (Lightning DDP, gloo, 2 CPU processes) makes the same updates as one
process on the same global batch: the normalising constant, the gradient average and the metrics are
global, each process holds its share of every mini-batch."""

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

SCRIPT = Path(__file__).with_name("data_parallel_fit.py")
REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def fit(tiny_model_path, tmp_path, devices: int, *extra: str) -> dict:
    out = tmp_path / f"devices{devices}.pt"
    command = [sys.executable, str(SCRIPT), tiny_model_path, str(out), "--devices", str(devices), *extra]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(out, weights_only=True)


@pytest.mark.parametrize(
    "extra",
    [(), ("--mini", "8"), ("--replay", "R3"), ("--replay", "R2", "--mini", "8"), ("--objective", "CISPO")],
    ids=["on-policy", "two-mini-batches", "R3", "R2-two-mini-batches", "CISPO-per-token"],
)
def test_two_processes_make_the_updates_of_one(tiny_model_path, tmp_path, extra):
    one = fit(tiny_model_path, tmp_path, 1, *extra)
    two = fit(tiny_model_path, tmp_path, 2, *extra)
    start = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).state_dict()
    moved = [name for name, weight in one["weights"].items() if not torch.equal(weight, start[name])]
    assert len(moved) > len(start) // 2  # the updates did change the model
    for name, weight in one["weights"].items():
        torch.testing.assert_close(two["weights"][name], weight, rtol=1e-5, atol=1e-6, msg=name)
    for name in ("train/loss", "train/kl", "train/kl_k3", "train/entropy", "train/reward", "train/grad_norm"):
        torch.testing.assert_close(two["metrics"][name], one["metrics"][name], rtol=1e-5, atol=1e-7, msg=name)
    if "--replay" in extra:
        assert one["metrics"]["train/routing/update_agreement"] == two["metrics"]["train/routing/update_agreement"]


@pytest.mark.vllm
def test_the_quickstart_trains_with_two_processes_each_with_its_vllm_engine(tmp_path):
    """End to end: 2 CPU processes (DDP, gloo), each rolling out its 8 prompts with its own in-process
    vLLM engine; the run finishes (a rank-0-only collective once hung it at the end) and writes one
    report and the log of both steps."""
    command = [
        *(sys.executable, "-m", "stable_rl.cli", "fit", "--config=recipes/quickstart.yaml"),
        *("--trainer.strategy=ddp", "--trainer.devices=2", "--trainer.accelerator=cpu", "--trainer.max_steps=2"),
        *("--trainer.limit_val_batches=0", "--trainer.enable_progress_bar=false"),
        f"--trainer.logger.init_args.save_dir={tmp_path}",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = (tmp_path / "quickstart").iterdir()
    assert (run / "report.png").is_file()
    with open(run / "metrics.csv") as f:
        steps = [row["step"] for row in csv.DictReader(f) if row.get("train/reward")]
    assert steps == ["0", "1"]
