"""vLLM and training colocated on one GPU: rollout throughput against the hardware floor, and what sleep mode
gives the update and costs the step.

    python -m benchmarks.gpu_colocated       # one CUDA GPU with vLLM installed, ~6 min; --help for sizes

The random 1.25B Qwen3-MoE of ``benchmarks/gpu_update.py`` (bfloat16, 0.30B active non-embedding). Prints,
side by side in one process:
1. generation: ``VLLMEngine`` eager, with CUDA graphs (the GPU default), and with CUDA graphs returning
   routes (Routing Replay R3), B sequences x (256 prompt + up to 1024 response tokens) for B in 64/256/1024;
   tokens/s against the floor of the measured card: each decode step reads every weight (at B >= 64 every
   expert is hit) and the KV cache at the measured bandwidth, or computes 2 x active parameters per token at
   the measured matmul rate, whichever is slower; prefill likewise;
2. colocated steps: the real MiniRL step through Lightning with the engine in the loop (sync, rollout of
   64 x (256 + 512) tokens, random 0/1 rewards, update) without and with ``sleep_mode``: seconds per phase
   and the GPU memory in use (the device's total - free, all allocators included: vLLM's sleep-mode memory
   is not PyTorch's) when the update starts and at its peak (polled every millisecond).
"""

import argparse
import os
import statistics
import threading
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import gpu_update
import lightning as L
import torch

from stable_rl.batch_plan import BatchPlan
from stable_rl.interfaces import policy_weights
from stable_rl.policy.runtime import ModelRuntime
from stable_rl.rl import PolicyModule
from stable_rl.rollout import RolloutBatch, VLLMEngine

GB = 1e9


def prompts_of(batch: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, vocab - 1, (length,), generator=g).tolist() for _ in range(batch)]


def floor_seconds(config, weight_bytes: float, active: int, batch: int, prompt: int, steps: int, hw) -> float:
    """Fewest seconds the card can prefill ``batch`` prompts and decode ``steps`` tokens for each."""
    matmul, bandwidth = hw
    kv = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * 2  # bytes per cached token
    total = max(weight_bytes / bandwidth, 2 * active * batch * prompt / matmul)
    for t in range(steps):
        read = weight_bytes + batch * (prompt + t) * kv
        total += max(read / bandwidth, 2 * active * batch / matmul)
    return total


def generation_engine(max_new_tokens: int, memory: float, max_num_seqs: int, **options) -> VLLMEngine:
    """The engine the generation benchmarks time: bfloat16, seed 0, awake between calls, ``options`` on top."""
    return VLLMEngine(
        max_new_tokens=max_new_tokens,
        dtype="bfloat16",
        seed=0,
        gpu_memory_utilization=memory,
        max_num_seqs=max_num_seqs,
        sleep_mode=False,
        **options,
    )


def generation_rows(model_dir: str, config, args, hw, weight_bytes: float, active: int) -> list[tuple]:
    settings = [
        ("eager", dict(enforce_eager=True), (64, 256)),
        ("CUDA graphs (default)", {}, (64, 256, 1024)),
        ("CUDA graphs + R3 routes", dict(return_routes=True), (256,)),
    ]
    rows = []
    for name, options, batches in settings:
        if not name.startswith(tuple(args.engines)):
            continue
        engine = generation_engine(args.response, args.generate_memory, max(batches), **options)
        start = time.perf_counter()
        engine.start(model_dir, args.prompt + args.response)
        started = time.perf_counter() - start
        engine.generate(prompts_of(8, args.prompt, config.vocab_size, 0), 1, step=0)  # warm-up
        for batch in batches:
            torch.cuda.synchronize()
            start = time.perf_counter()
            samples = engine.generate(prompts_of(batch, args.prompt, config.vocab_size, batch), 1, step=batch)
            torch.cuda.synchronize()
            seconds = time.perf_counter() - start
            tokens = sum(len(s.response_ids) for s in samples)
            steps = max(len(s.response_ids) for s in samples)
            floor = floor_seconds(config, weight_bytes, active, batch, args.prompt, steps, hw)
            rows.append((name, batch, tokens, seconds, tokens / seconds, batch * steps / floor, started))
            print(f"  {name}, B={batch}: {tokens / seconds:,.0f} tokens/s", flush=True)
        engine.close()
    return rows


def in_use() -> float:
    """GB in use on the current GPU, by anything (the device's total - free)."""
    free, total = torch.cuda.mem_get_info()
    return (total - free) / GB


class PeakInUse:
    """Polls ``in_use`` in a thread between ``start`` and ``stop``; ``stop`` returns the peak."""

    def start(self) -> None:
        self.peak, self.running = in_use(), True
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while self.running:
            self.peak = max(self.peak, in_use())
            time.sleep(0.001)

    def stop(self) -> float:
        self.running = False
        self.thread.join()
        return max(self.peak, in_use())


class EngineRollouts(L.LightningDataModule):
    """Each step: sync the engine to the policy, sample ``group`` responses per random prompt, let the engine
    sleep (if it does), random 0/1 rewards, one update of the whole batch in micro-batches of ``micro``; records
    the seconds of each phase and the GPU memory in use when the update starts, then polls its peak until the step
    ends."""

    def __init__(
        self, model_dir: str, engine: VLLMEngine, prompts: list[list[int]], group: int, steps: int, micro: int
    ) -> None:
        super().__init__()
        self.model_dir, self.engine, self.prompts, self.group, self.steps = model_dir, engine, prompts, group, steps
        self.plan = BatchPlan(len(prompts), group, micro_batch_size=micro)
        self.times: dict[str, list[float]] = {"sync": [], "rollout": [], "sleep": []}
        self.at_start: list[float] = []
        self.peaks: list[float] = []
        self.poll = PeakInUse()

    def train_dataloader(self):
        return torch.utils.data.DataLoader(range(self.steps), batch_size=None)

    def timed(self, phase: str, fn):
        torch.cuda.synchronize()
        start = time.perf_counter()
        result = fn()
        torch.cuda.synchronize()
        self.times[phase].append(time.perf_counter() - start)
        return result

    def on_before_batch_transfer(self, batch, dataloader_idx: int) -> RolloutBatch:
        step, policy = self.trainer.global_step, policy_weights(self.trainer)
        if not self.engine.running:
            self.engine.start(self.model_dir, len(self.prompts[0]) + self.engine.sampling.max_new_tokens)
        self.timed("sync", lambda: self.engine.sync(policy.full_weights(), version=step))
        samples = self.timed("rollout", lambda: self.engine.generate(self.prompts, self.group, step))
        self.timed("sleep", self.engine.sleep)
        self.at_start.append(in_use())
        self.poll.start()
        rewards = torch.randint(0, 2, (len(samples),), generator=torch.Generator().manual_seed(step)).float()
        batch = RolloutBatch.from_samples(samples, rewards, self.group, 0, 1.0, policy_version=step)
        batch.plan = self.plan
        return batch

    def teardown(self, stage: str) -> None:
        self.engine.close()


class UpdateEnd(L.Callback):
    """Ends each step's memory polling; records the seconds of pi_old + the update."""

    def __init__(self, data: EngineRollouts) -> None:
        self.data = data
        self.updates: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        self.data.peaks.append(self.data.poll.stop())
        self.updates.append(float(trainer.callback_metrics["time/pi_old"] + trainer.callback_metrics["time/update"]))


def colocated_row(model_dir: str, config, args, sleep_mode: bool) -> dict:
    engine = VLLMEngine(
        max_new_tokens=args.step_response,
        dtype="bfloat16",
        seed=0,
        gpu_memory_utilization=args.colocated_memory,
        sleep_mode=sleep_mode,
    )
    data = EngineRollouts(
        model_dir,
        engine,
        prompts_of(args.prompts, args.prompt, config.vocab_size, 7),
        args.group,
        args.steps,
        args.micro,
    )
    peak = UpdateEnd(data)
    module = PolicyModule(
        model_dir,
        optimizer=lambda params: torch.optim.AdamW(params, lr=1e-6),
        dtype="bfloat16",
        runtime=ModelRuntime(experts_implementation="grouped_mm"),
    )
    trainer = gpu_update.quiet_trainer(max_steps=args.steps, devices=1, callbacks=[peak])
    trainer.fit(module, datamodule=data)
    later = slice(1, None)  # the first step compiles and warms up

    def median(values):
        return statistics.median(values[later])

    phases = [data.times[phase][later] for phase in ("sync", "rollout", "sleep")] + [peak.updates[later]]
    return {
        "sleep_mode": sleep_mode,
        "steps": [sum(step) for step in zip(*phases, strict=True)],  # each timed step's sum of the phases
        **{phase: median(values) for phase, values in data.times.items()},
        "update": median(peak.updates),
        "at_start": median(data.at_start),
        "peak": max(data.peaks[later]),
    }


def parser() -> argparse.ArgumentParser:
    parser = gpu_update.parser()
    parser.description = __doc__
    parser.add_argument("--response", type=int, default=1024, help="generation: max response tokens")
    parser.add_argument("--generate-memory", type=float, default=0.7, help="gpu_memory_utilization, generation")
    parser.add_argument("--step-response", type=int, default=512, help="colocated steps: max response tokens")
    parser.add_argument("--colocated-memory", type=float, default=0.4, help="gpu_memory_utilization, colocated")
    parser.add_argument("--only", choices=["generation", "colocated"], default=None)
    parser.add_argument(
        "--engines", nargs="+", default=["eager", "CUDA graphs"], help="generation: engine settings (name prefixes)"
    )
    parser.set_defaults(prompts=8, group=8, steps=6)
    return parser


def main() -> None:
    args = parser().parse_args()
    name = torch.cuda.get_device_name()
    import vllm

    hw = gpu_update.hardware("cuda")
    print(
        f"\n{name}, torch {torch.__version__}, vLLM {vllm.__version__}: bf16 matmul {hw[0] / 1e12:.0f} TFLOP/s, "
        f"memory bandwidth {hw[1] / 1e12:.2f} TB/s (measured)\n",
        flush=True,
    )
    config = gpu_update.model_config(args)
    model, model_dir = gpu_update.random_model(args, config)
    total, active = gpu_update.parameter_counts(model, config)
    weight_bytes = 2 * (total - model.get_input_embeddings().weight.numel())  # a decode step reads B embedding rows
    del model
    print(f"model: {total / 1e9:.2f}B parameters, {active / 1e9:.2f}B active non-embedding\n", flush=True)

    if args.only in (None, "generation"):
        rows = generation_rows(model_dir, config, args, hw, weight_bytes, active)
        print(f"\nGeneration, {args.prompt}-token prompts, responses up to {args.response} tokens, bfloat16:\n")
        print("| engine | sequences | generated tokens | s | tokens/s | floor tokens/s | measured/floor | start s |")
        print("|---|---|---|---|---|---|---|---|")
        for what, batch, tokens, seconds, rate, floor, started in rows:
            print(
                f"| {what} | {batch} | {tokens:,} | {seconds:.1f} | {rate:,.0f} | {floor:,.0f} | {rate / floor:.0%} "
                f"| {started:.0f} |"
            )
    if args.only in (None, "colocated"):
        results = [colocated_row(model_dir, config, args, sleep) for sleep in (False, True)]
        print(
            f"\nColocated MiniRL steps ({args.prompts} x {args.group} responses of {args.prompt} + up to "
            f"{args.step_response} tokens, gpu_memory_utilization {args.colocated_memory}), medians of steps 2-"
            f"{args.steps}:\n"
        )
        print(
            "| sleep_mode | sync s | rollout s | sleep s | pi_old + update s | step s, median (min-max) "
            "| in use at the update's start GB | peak in use during the update GB |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for r in results:
            steps = r["steps"]
            print(
                f"| {'on' if r['sleep_mode'] else 'off'} | {r['sync']:.2f} | {r['rollout']:.2f} | {r['sleep']:.2f} "
                f"| {r['update']:.2f} | {statistics.median(steps):.2f} ({min(steps):.2f}-{max(steps):.2f}) "
                f"| {r['at_start']:.1f} | {r['peak']:.1f} |"
            )


if __name__ == "__main__":
    main()
