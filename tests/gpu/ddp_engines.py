"""MiniRL + R3 under Lightning DDP on every visible GPU, each process with its own vLLM engine; every rank
writes where its engine and its memory went (``OUT_DIR/rank<r>.json``).

    python tests/gpu/ddp_engines.py OUT_DIR [--devices 2] [--steps 3]

Run by ``test_vllm_gpu_ddp.py`` (Lightning relaunches this script for ranks >= 1).
"""

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import lightning as L
import torch

from stable_rl.callbacks import RoutingReplay
from stable_rl.data import ReasoningGymPrompts
from stable_rl.rl import PolicyModule, RolloutDataModule
from stable_rl.rollout import VLLMEngine

REPO = Path(__file__).resolve().parents[2]


class Placement(L.Callback):
    """After the last step: this rank's engine device, current device, and its own memory on every GPU."""

    def __init__(self, out: Path, engine) -> None:
        self.out, self.engine = out, engine

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        engine = self.engine
        placed = engine.llm.apply_model(lambda model: str(next(model.parameters()).device))[0]
        report = {
            "rank": trainer.global_rank,
            "engine_device": placed,
            "current_device": torch.cuda.current_device() if torch.cuda.is_available() else None,
            "allocated_gib": [torch.cuda.memory_reserved(d) / 2**30 for d in range(torch.cuda.device_count())],
            "metrics": {k: float(v) for k, v in trainer.logged_metrics.items()},
        }
        (self.out / f"rank{trainer.global_rank}.json").write_text(json.dumps(report))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--accelerator", default="gpu", help="cpu: a check of this script without GPUs")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    L.seed_everything(0)
    model_path = str(REPO / "data" / "tiny-qwen3-moe-sft-format")
    module = PolicyModule(model_path)
    data = RolloutDataModule(
        ReasoningGymPrompts(["basic_arithmetic", "chain_sum"], size=256, seed=100000, max_terms=3, max_digits=2),
        VLLMEngine(max_new_tokens=64, dtype="bfloat16" if args.accelerator == "gpu" else "float32"),
        prompts_per_step=16,
        group_size=8,
        max_prompt_tokens=128,
        model_path=model_path,
        micro_batch_size=64,
    )
    trainer = L.Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        strategy="ddp" if args.devices > 1 else "auto",
        max_steps=args.steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[RoutingReplay("R3"), Placement(out, data.engine)],
    )
    trainer.fit(module, datamodule=data)


if __name__ == "__main__":
    main()
