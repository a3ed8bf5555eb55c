"""Data-parallel scaling of the MiniRL step from 1 to N GPUs: Lightning DDP and FSDP2 over NCCL.

    python -m benchmarks.gpu_scaling --devices 2      # a host with 2 CUDA GPUs, ~6 min

The model and per-GPU batch of ``benchmarks/gpu_update.py`` (a 1.25B Qwen3-MoE shape, 64 responses of
256 + 1k-4k tokens per GPU, bfloat16): each process trains on its own synthetic rollouts (so the
global batch grows with the GPUs); DDP all-reduces the update's gradients, FSDP2
(``stable_rl.strategies.FSDP2Strategy``) shards weights, gradients and optimizer state and gathers
each layer's weights for its forward and backward. Prints seconds per step, tokens/s, the speed-up
over 1 GPU (ideal: N) and rank 0's peak GPU memory, for 1 GPU, N with DDP and N with FSDP2.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import gpu_update
import torch


def run(devices: int, strategy: str, out: str, args) -> None:
    """One fit on ``devices`` GPUs; rank 0 writes the medians to ``out`` (Lightning relaunches this
    script for the other ranks)."""
    rank = int(os.environ.get("LOCAL_RANK", 0))
    config = gpu_update.model_config(args)
    _, model_dir = gpu_update.random_model(args, config)
    batch = gpu_update.synthetic_rollouts(args, config, seed=rank)
    gpu_update.reset_peak()
    times, trainer = gpu_update.fit_synthetic(model_dir, batch, args, devices=devices, strategy=strategy)
    tokens = int(batch.attention_mask.sum())
    totals = trainer.strategy.reduce(torch.tensor(float(tokens), device=trainer.strategy.root_device), reduce_op="sum")
    if trainer.global_rank == 0:
        step = statistics.median(a + b for a, b in zip(times.pi_old[1:], times.update[1:], strict=True))
        with open(out, "w") as f:
            json.dump({"devices": devices, "seconds": step, "tokens": float(totals), "peak": gpu_update.peak_gb()}, f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4, help="steps per run (the first is left out)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--strategy", default="ddp", help=argparse.SUPPRESS)
    parser.add_argument("--strategies", default="one,ddp,fsdp2", help="rows: one (1 GPU), ddp, fsdp2 (N GPUs)")
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()  # the rest: gpu_update.py's model and batch sizes
    sizes = gpu_update.parser().parse_args([*rest, "--steps", str(args.steps)])
    if args.child:
        run(args.child, args.strategy, args.out, sizes)
        return
    rows = []
    rows_asked = [(1, "one GPU") if name == "one" else (args.devices, name) for name in args.strategies.split(",")]
    for devices, strategy in rows_asked:
        out = tempfile.mktemp(suffix=".json")
        command = [sys.executable, "-m", __spec__.name, "--child", str(devices), "--strategy", strategy, "--out", out]
        subprocess.run([*command, "--steps", str(args.steps), *rest], check=True)
        with open(out) as f:
            rows.append(json.load(f) | {"strategy": strategy})
    card = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    print(f"\n{card} x {args.devices}, torch {torch.__version__}\n")
    print("| GPUs | strategy | responses per step | s per step | tokens/s | speed-up | peak GB (rank 0) |")
    print("|---|---|---|---|---|---|---|")
    base = rows[0]["tokens"] / rows[0]["seconds"]  # speed-ups relative to the first row
    for row in rows:
        rate = row["tokens"] / row["seconds"]
        responses = row["devices"] * sizes.prompts * sizes.group
        print(
            f"| {row['devices']} | {row['strategy']} | {responses} | {row['seconds']:.3f} | {rate:,.0f} | "
            f"{rate / base:.2f}x | {row['peak']:.1f} |"
        )


if __name__ == "__main__":
    main()
