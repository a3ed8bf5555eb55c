"""One fit of PolicyModule on a fixed global batch by 1 or more processes (DDP or FSDP2, over gloo on CPUs,
NCCL on GPUs), each holding its share of every mini-batch; rank 0 saves the final weights and metrics.

    python tests/integration/data_parallel_fit.py MODEL_PATH OUT.pt --devices 2 [--strategy fsdp2] [--replay R3] [--mini 8]
        [--objective CISPO]

Run by ``test_data_parallel.py`` (Lightning relaunches this script for ranks >= 1).
"""

import argparse
import os
from dataclasses import replace

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import lightning as L
import torch
from lightning.pytorch.strategies import DDPStrategy
from transformers import AutoConfig

from stable_rl import objectives
from stable_rl.batch_plan import BatchPlan
from stable_rl.callbacks import HFExport, RoutingReplay
from stable_rl.policy.runtime import ModelRuntime
from stable_rl.rl import PolicyModule
from stable_rl.rollout import HFEngine, RolloutBatch, Sample
from stable_rl.strategies import FSDP2Strategy

PROMPTS, GROUP, STEPS = 4, 4, 2


def global_batch(model_path: str) -> RolloutBatch:
    """4 prompts x 4 responses of 1-8 random tokens, rewards with signal in every group but the last (all
    wrong: zero advantages, and a share of the processes' ``train/groups_with_signal`` that differs), and valid
    random routes (distinct top-k experts per token and MoE layer)."""
    config = AutoConfig.from_pretrained(model_path)
    g = torch.Generator().manual_seed(0)
    samples = []
    for p in range(PROMPTS):
        prompt = torch.randint(3, config.vocab_size, (3 + p,), generator=g).tolist()
        for _ in range(GROUP):
            n = int(torch.randint(1, 9, (1,), generator=g))
            response = torch.randint(3, config.vocab_size, (n,), generator=g).tolist()
            scores = torch.rand(len(prompt) + n - 1, config.num_hidden_layers, config.num_experts, generator=g)
            routes = scores.argsort(-1)[..., : config.num_experts_per_tok].to(torch.int16).numpy()
            samples.append(Sample(prompt, response, (-torch.rand(n, generator=g) * 3).tolist(), routes))
    rewards = torch.tensor([1.0, 0, 0, 1, 0, 1, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0])
    return RolloutBatch.from_samples(samples, rewards, GROUP, 0, temperature=1.0, policy_version=0)


class Shards(L.LightningDataModule):
    """The same global batch every step; each process takes its consecutive share of every
    mini-batch, as ``PromptBatches`` shares prompts, and the step's plan (``mini`` responses per update, micro-batches
    of 2). ``engine``: an HF engine never started (R3 asks it
    for routes, ``request_routes``; the batch has them)."""

    def __init__(self, batch: RolloutBatch, mini: int) -> None:
        super().__init__()
        self.batch, self.mini, self.engine = batch, mini, HFEngine()

    def request_routes(self) -> None:
        self.engine.enable_routes()

    def train_dataloader(self):
        return torch.utils.data.DataLoader(range(STEPS), batch_size=None)

    def on_before_batch_transfer(self, step, dataloader_idx: int) -> RolloutBatch:
        world, rank = self.trainer.world_size, self.trainer.global_rank
        share = self.mini // world
        rows = torch.cat([torch.arange(s + rank * share, s + (rank + 1) * share) for s in range(0, 16, self.mini)])
        batch = replace(
            self.batch.rows(rows), policy_version=self.trainer.global_step, row_index=None
        )  # rows 0..share-1
        batch.plan = BatchPlan(PROMPTS, GROUP, self.mini, micro_batch_size=2, processes=world)
        return batch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_path")
    parser.add_argument("out")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--replay", choices=["R2", "R3"])
    parser.add_argument("--mini", type=int, default=16, help="responses per update over all processes")
    parser.add_argument("--objective", choices=["MiniRL", "CISPO"], default="MiniRL")
    parser.add_argument("--accelerator", choices=["cpu", "gpu"], default="cpu", help="gpu: NCCL instead of gloo")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--strategy", choices=["ddp", "fsdp2"], default="ddp", help="ddp: with --devices > 1")
    parser.add_argument("--mixed-precision", choices=["bfloat16"], help="FSDP2's compute dtype")
    parser.add_argument("--export", help="HF model directory HFExport writes at the end")
    args = parser.parse_args()
    torch.manual_seed(0)
    module = PolicyModule(
        args.model_path,
        objective=getattr(objectives, args.objective)(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.5),
        dtype=args.dtype,
        mixed_precision=args.mixed_precision,
        runtime=ModelRuntime(experts_implementation="eager"),
    )
    backend = "gloo" if args.accelerator == "cpu" else "nccl"
    strategies = {"ddp": DDPStrategy, "fsdp2": FSDP2Strategy}
    distributed = args.devices > 1 or args.strategy == "fsdp2"  # FSDP2 on one device too: its mixed precision
    strategy = strategies[args.strategy](process_group_backend=backend) if distributed else "auto"
    trainer = L.Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        strategy=strategy,
        max_steps=STEPS * 16 // args.mini,
        use_distributed_sampler=False,  # every process walks the same steps, sharing each batch
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[
            *([RoutingReplay(args.replay, diagnostics=True)] if args.replay else []),
            *([HFExport(args.export)] if args.export else []),
        ],
    )
    trainer.fit(module, datamodule=Shards(global_batch(args.model_path), args.mini))
    weights = {name: value.cpu() for name, value in module.full_weights()}  # gathered by every process
    if trainer.global_rank == 0:
        metrics = {k: float(v) for k, v in trainer.logged_metrics.items()}
        held = sum(getattr(p, "_local_tensor", p).numel() for p in module.policy.parameters())  # this process's
        share = held / sum(p.numel() for p in module.policy.parameters())
        dtypes = sorted({str(p.dtype) for p in module.policy.parameters()})
        torch.save({"weights": weights, "metrics": metrics, "share": share, "dtypes": dtypes}, args.out)


if __name__ == "__main__":
    main()
