"""A requeued run: SIGTERM (preemption, ``kill``) keeps a checkpoint at a step boundary and exits 143;
``--ckpt_path=last`` then finds it and resumes into the same log version."""

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import quickstart_stack
import torch

REPO = Path(__file__).resolve().parents[2]
SMALL = [
    "--trainer.limit_val_batches=0",
    "--trainer.enable_progress_bar=false",
    "--trainer.logger.init_args.flush_logs_every_n_steps=1",  # metrics.csv shows when training is under way
    "--data.init_args.prompts_per_step=2",
    "--data.init_args.group_size=2",
    "--data.init_args.engine.init_args.max_new_tokens=8",
]

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_sigterm_keeps_a_checkpoint_exits_143_and_ckpt_path_last_resumes_it(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    fit = [*quickstart_stack.FIT, *SMALL]
    fit.append(f"--trainer.logger.init_args.save_dir={tmp_path}")
    run_dir = tmp_path / "quickstart" / "version_0"
    with open(tmp_path / "first.err", "w") as stderr:  # a file, not a pipe: vLLM's logs would fill a pipe
        process = subprocess.Popen([*fit, "--trainer.max_steps=500"], cwd=REPO, env=env, stderr=stderr)
        deadline = time.monotonic() + 300
        metrics = run_dir / "metrics.csv"
        while not (metrics.exists() and "train/reward" in metrics.read_text()):  # a step has been trained
            assert process.poll() is None and time.monotonic() < deadline, (tmp_path / "first.err").read_text()[-3000:]
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=300) == 143, (tmp_path / "first.err").read_text()[-3000:]
    last = run_dir / "checkpoints" / "last.ckpt"
    stopped = torch.load(last, weights_only=False)["global_step"]
    assert 1 <= stopped < 500
    resumed = subprocess.run(
        [*fit, f"--trainer.max_steps={stopped + 1}", "--ckpt_path=last"],  # what a requeue script runs
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert torch.load(last, weights_only=False)["global_step"] == stopped + 1
    assert sorted(p.name for p in run_dir.parent.iterdir()) == ["version_0"]  # logged on into the same version
