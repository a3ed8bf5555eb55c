"""Each rung of the simulated mismatch ladder measured in training, not only against a fixed policy.

Runs ``recipes/minirl.yaml`` with the HF engine's simulated FP8 (``recipes/paper/fp8.yaml``), R3 (so the
routing agreement is logged) and each rung's overlay (``recipes/paper/mismatch/``) for a few global steps,
one after another, keeps each run's metrics under ``--out``, and prints the means over the steps:

    python -m benchmarks.ladder_in_training --steps 20 --out benchmarks/cpu/ladder_in_training
    python -m benchmarks.ladder_in_training --out benchmarks/cpu/ladder_in_training --report  # the table again

With ``--gpu`` (one CUDA GPU with vLLM) the rungs are real vLLM's instead, on ``recipes/gpu/minirl_r3.yaml``: the
bfloat16 engine, FP8 weights and activations (``recipes/gpu/fp8.yaml``, one scale per tensor: vLLM 0.26-0.32
crash loading the per-channel scheme), an FP8 KV cache (``recipes/gpu/fp8_kv.yaml``) and both, the four runs sharing the GPU:

    python -m benchmarks.ladder_in_training --gpu --steps 20 --out benchmarks/gpu/ladder_in_training
"""

import argparse
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from stable_rl.analysis.run_logs import read_run

BASE = ["recipes/minirl.yaml", "recipes/paper/fp8.yaml", "recipes/paper/r3.yaml"]
RUNGS = ["", "fp8_per_tensor", "e5m2", "fp4", "fp8_router", "fp8_kv"]  # "": fp8.yaml's per-channel e4m3
COLUMNS = {
    "KL k3": "train/kl_k3",
    "KL k3 w/o replay": "train/kl_k3_no_replay",
    "mean |log pi_old/mu_old|": "train/health/train_infer_abs",
    "routing agreement": "train/routing/infer_agreement",
    "reward": "train/reward",
}


GPU_BASE = ["recipes/gpu/minirl_r3.yaml"]
GPU_RUNGS = [
    [],
    ["recipes/gpu/fp8.yaml"],
    ["recipes/gpu/fp8_kv.yaml"],
    ["recipes/gpu/fp8.yaml", "recipes/gpu/fp8_kv.yaml"],
]
GPU_MEMORY = 0.1  # of the GPU for each of the four engines (the tiny model): they share it with the training runs
# A fixed KV cache, as every recipe whose runs share a GPU has (recipes/frontier/onpolicy_fp8.yaml): sized from
# gpu_memory_utilization, vLLM profiles its memory at start-up and fails ("Error in memory profiling") when
# another process frees memory meanwhile, as the other rungs' engines do each time they go to sleep.
GPU_KV_CACHE_BYTES = 1 << 30


def recipes(gpu: bool = False) -> list[str]:
    """The sweep's recipes, one config stack (space-separated) per rung."""
    if gpu:
        return [" ".join(GPU_BASE + rung) for rung in GPU_RUNGS]
    return [" ".join(BASE + ([f"recipes/paper/mismatch/{rung}.yaml"] if rung else [])) for rung in RUNGS]


def fit_args(steps: int, gpu: bool = False) -> list[str]:
    """What every rung's ``stable-rl fit`` gets after its recipe."""
    args = [f"--trainer.max_steps={steps}", "--trainer.limit_val_batches=0", "--trainer.enable_progress_bar=false"]
    engine = "--data.init_args.engine.init_args"
    return args + (
        [f"{engine}.gpu_memory_utilization={GPU_MEMORY}", f"{engine}.kv_cache_memory_bytes={GPU_KV_CACHE_BYTES}"]
        if gpu
        else []
    )


def run(steps: int, out: Path, gpu: bool = False) -> int:
    """The sweep of every rung; each run's metrics.csv copied to ``out`` also when another rung failed (the
    sweep names it). Returns the sweep's exit code."""
    save_dir = Path("runs/ladder_in_training")
    shutil.rmtree(save_dir, ignore_errors=True)
    command = [sys.executable, "-m", "stable_rl.cli.sweep", "--seeds", "0", "--save-dir", str(save_dir)]
    if gpu:  # all rungs at once on the one GPU
        command += ["--parallel", str(len(GPU_RUNGS)), "--per-gpu", str(len(GPU_RUNGS))]
    code = subprocess.run([*command, "--recipes", *recipes(gpu), "--", *fit_args(steps, gpu)]).returncode
    for csv in save_dir.glob("*/version_0/metrics.csv"):
        target = out / csv.parent.parent.name / "version_0"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(csv, target / "metrics.csv")
    return code


def table(out: Path) -> str:
    lines = ["| run | " + " | ".join(COLUMNS) + " |", "|---|" + "---|" * len(COLUMNS)]
    for run_dir in sorted(out.glob("*/version_0")):
        series = read_run(run_dir)
        cells = [f"{statistics.fmean(v for _, v in series[m]):.3g}" if m in series else "-" for m in COLUMNS.values()]
        lines.append(f"| {run_dir.parent.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="global steps per rung")
    parser.add_argument("--out", type=Path, help="default: benchmarks/cpu/ladder_in_training, or gpu/ with --gpu")
    parser.add_argument("--report", action="store_true", help="print the table from the kept logs only")
    parser.add_argument("--gpu", action="store_true", help="real vLLM's rungs on one CUDA GPU")
    args = parser.parse_args()
    args.out = args.out or Path("benchmarks", "gpu" if args.gpu else "cpu", "ladder_in_training")
    code = 0 if args.report else run(args.steps, args.out, args.gpu)
    print(table(args.out))
    if code:
        sys.exit(f"the sweep failed (exit code {code}): see the failed runs it named above; the table has the others")


if __name__ == "__main__":
    main()
