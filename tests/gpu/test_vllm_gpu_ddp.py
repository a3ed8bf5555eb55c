"""Two GPUs under Lightning DDP: each process's vLLM engine lives on that process's GPU (vLLM's single
worker took cuda:0 for every process before), R3 trains from each engine's routes, and two processes
make the updates of one (NCCL). Skipped with fewer than 2 GPUs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent
REPO = HERE.parents[1]

pytest.importorskip("vllm")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.vllm,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices"),
]


def run(*command: str) -> None:
    done = subprocess.run([sys.executable, *command], capture_output=True, text=True, timeout=900, cwd=REPO)
    assert done.returncode == 0, done.stderr[-4000:]


def test_each_process_has_its_engine_on_its_own_gpu(tmp_path):
    run(str(HERE / "ddp_engines.py"), str(tmp_path), "--devices", "2", "--steps", "3")
    for rank in (0, 1):
        report = json.loads((tmp_path / f"rank{rank}.json").read_text())
        print(report)
        assert report["engine_device"] == f"cuda:{rank}" and report["current_device"] == rank
        assert report["allocated_gib"][rank] > 2 and report["allocated_gib"][1 - rank] < 0.5
        metrics = report["metrics"]
        assert metrics["train/routing/infer_agreement"] > 0.9  # R3 replayed the engine's routes
        assert all(value == value for value in metrics.values())  # nothing NaN


def test_two_gpus_make_the_updates_of_one(tiny_model_path, tmp_path):
    """The CPU test's fixed global batch (tests/integration/data_parallel_fit.py) with R3, on 1 GPU and
    under DDP on 2: the same weights and metrics."""
    results = {}
    for devices in (1, 2):
        out = tmp_path / f"devices{devices}.pt"
        run(
            "tests/integration/data_parallel_fit.py",
            tiny_model_path,
            str(out),
            "--devices",
            str(devices),
            "--accelerator",
            "gpu",
            "--replay",
            "R3",
        )
        results[devices] = torch.load(out, weights_only=True)
    one, two = results[1], results[2]
    for name, weight in one["weights"].items():
        torch.testing.assert_close(two["weights"][name], weight, rtol=1e-5, atol=1e-6, msg=name)
    for name in ("train/loss", "train/kl_k3", "train/entropy", "train/grad_norm"):
        torch.testing.assert_close(two["metrics"][name], one["metrics"][name], rtol=1e-5, atol=1e-7, msg=name)
