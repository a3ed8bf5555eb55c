"""Bad input met by the real CLI: a clear error naming the problem and the fix, nothing written lost.

Each case runs ``stable-rl fit`` in its own process (a vLLM that failed to start is not reused)."""

import os
import subprocess
from pathlib import Path

import pytest
import quickstart_stack

REPO = Path(__file__).resolve().parents[2]
FIT = [*quickstart_stack.FIT, "--trainer.max_steps=1"]

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def fails(tmp_path: Path, *overrides: str) -> str:
    """stderr of a fit that must fail; a file already in its checkpoint folder must survive it."""
    kept = tmp_path / "quickstart" / "version_0" / "checkpoints" / "last.ckpt"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"an earlier checkpoint")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    args = [*FIT, f"--trainer.logger.init_args.save_dir={tmp_path}", "--trainer.logger.init_args.version=0", *overrides]
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0
    assert kept.read_bytes() == b"an earlier checkpoint"
    return done.stderr


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (  # out-of-memory KV cache
            ["--data.init_args.engine.init_args.kv_cache_memory_bytes=4096"],
            "The KV cache cannot hold one sequence of 192 tokens (prompt + response): raise "
            "data.engine.init_args.kv_cache_memory_bytes",
        ),
        (  # a response that cannot fit the model's context: named before vLLM starts
            ["--data.init_args.engine.init_args.max_new_tokens=2000"],
            "data.max_prompt_tokens=128 + max_new_tokens=2000 (the engine's or data.eval_sampling's) = 2128 "
            "tokens exceed the model's context of 1024",
        ),
        (  # tensor parallelism in one process: the weight sync cannot reach vLLM's worker processes
            ["--data.init_args.engine.init_args.tensor_parallel_size=2"],
            "tensor_parallel_size=2 in one training process",
        ),
        (  # a prompt longer than the context allowed
            ["--data.init_args.max_prompt_tokens=8"],
            "exceeds data.max_prompt_tokens=8",
        ),
        (  # Lightning's autocast: a training-inference mismatch of its own, refused before vLLM starts
            ["--trainer.precision=bf16-mixed"],
            "trainer.precision=bf16-mixed casts the policy's forward",
        ),
        (  # Lightning's automatic clipping: it would suggest automatic optimization
            ["--trainer.gradient_clip_val=1.0"],
            "trainer.gradient_clip_val=1.0: stable-rl clips each of its updates itself",
        ),
    ],
    ids=["kv-cache-oom", "context-overflow", "tp-in-one-process", "prompt-too-long", "bf16-mixed", "gradient-clip-val"],
)
def test_the_error_names_the_problem_and_the_fix(tmp_path, overrides, message):
    stderr = fails(tmp_path, "--trainer.limit_val_batches=0", *overrides)
    assert message in stderr, stderr[-3000:]
