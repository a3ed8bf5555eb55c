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


def start_and_train_a_step(fit: list[str], run_dir: Path, stderr_path: Path, **popen) -> subprocess.Popen:
    """The run, started and waited for until it has trained a step (its metrics.csv shows a reward)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    with open(stderr_path, "w") as stderr:  # a file, not a pipe: vLLM's logs would fill a pipe
        process = subprocess.Popen(fit, cwd=REPO, env=env, stderr=stderr, **popen)
    deadline = time.monotonic() + 300
    metrics = run_dir / "metrics.csv"
    while not (metrics.exists() and "train/reward" in metrics.read_text()):
        assert process.poll() is None and time.monotonic() < deadline, stderr_path.read_text()[-3000:]
        time.sleep(0.2)
    return process


def test_sigterm_keeps_a_checkpoint_exits_143_and_ckpt_path_last_resumes_it(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    fit = [*quickstart_stack.FIT, *SMALL]
    fit.append(f"--trainer.logger.init_args.save_dir={tmp_path}")
    run_dir = tmp_path / "quickstart" / "version_0"
    process = start_and_train_a_step([*fit, "--trainer.max_steps=500"], run_dir, tmp_path / "first.err")
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


def test_sigterm_to_the_whole_process_group_takes_the_same_graceful_stop(tmp_path):
    """``timeout`` and schedulers signal the job's whole process group: the verifier's workers are in it, and the
    rollout scored after the signal (the step in progress, and each later one while it finishes) needs them."""
    fit = [*quickstart_stack.FIT, *SMALL, f"--trainer.logger.init_args.save_dir={tmp_path}", "--trainer.max_steps=500"]
    run_dir = tmp_path / "quickstart" / "version_0"
    err = tmp_path / "run.err"
    process = start_and_train_a_step(fit, run_dir, err, start_new_session=True)  # a job: its own process group
    os.killpg(process.pid, signal.SIGTERM)
    assert process.wait(timeout=300) == 143, err.read_text()[-3000:]
    log = err.read_text() + (run_dir / "console.log").read_text()  # the run's stderr, then what it logged
    assert "BrokenProcessPool" not in log and "Traceback" not in log, log[-3000:]
    stopped = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["global_step"]
    assert 1 <= stopped < 500
    assert f"terminated (SIGTERM) after step {stopped}: checkpoint kept at" in log
