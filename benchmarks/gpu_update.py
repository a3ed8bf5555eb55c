"""The MiniRL update on one GPU against the raw model, and the limits of the hardware.

    python -m benchmarks.gpu_update            # one CUDA GPU (H100/H200), ~6 min; --help for sizes

A random Qwen3-MoE of ~1.25B parameters (hidden 1024, 12 layers, 64 experts top-8, expert width 384,
vocab 151,936: 0.30B active non-embedding), bfloat16, ``experts_implementation="grouped_mm"``, trained on synthetic
rollouts (8 prompts x 8 responses of 256 + 1k-4k tokens, random 0/1 rewards; the rollout engine is not
timed here). Prints, side by side in one process:
1. the hardware: measured bf16 matmul rate and memory bandwidth (the floors below use them);
2. update throughput, tokens/s over real (non-padding) tokens, and MFU (model FLOPs: 6 x active
   non-embedding parameters + causal attention, per token, over the card's bf16 dense peak), for the raw
   model's forward + float32 log-softmax + backward (in batch order, and on the same length-sorted
   micro-batches stable-rl uses) and for stable-rl's step through Lightning (the pi_old pass and the
   update, from the ``time/`` metrics every run logs), without and with Routing Replay R2 and R3;
3. peak memory of log-prob + entropy computation, chunked as stable-rl does vs full float32 logits;
4. the HF engine's generation throughput against the memory-bandwidth floor (every decode step reads
   all weights and the KV cache).
"""

import argparse
import math
import statistics
import tempfile
import time
from dataclasses import replace

import lightning as L
import torch
from transformers import AutoModelForCausalLM, Qwen3MoeConfig

from stable_rl.batch_plan import BatchPlan
from stable_rl.callbacks import RoutingReplay
from stable_rl.policy.logprobs import token_logprobs_and_entropy
from stable_rl.policy.runtime import ModelRuntime
from stable_rl.rl import PolicyModule
from stable_rl.rollout import HFEngine, RolloutBatch
from stable_rl.rollout.engine import Sample
from stable_rl.strategies import FSDP2Strategy

PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}  # dense bf16 tensor-core FLOP/s (SXM)


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def seconds(fn, repeat: int = 1) -> float:
    """Median wall seconds of ``fn()`` over ``repeat`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeat):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def hardware(device: str) -> tuple[float, float]:
    """(measured bf16 matmul FLOP/s, memory bandwidth bytes/s) of ``device``."""
    n = 8192 if device == "cuda" else 512
    a, b = (
        torch.randn(n, n, device=device, dtype=torch.bfloat16),
        torch.randn(n, n, device=device, dtype=torch.bfloat16),
    )
    flops = 2 * n**3 * 10 / seconds(lambda: [a @ b for _ in range(10)], repeat=3)
    size = 2**30 if device == "cuda" else 2**24
    src = torch.empty(size, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    bandwidth = 2 * size * 10 / seconds(lambda: [dst.copy_(src) for _ in range(10)], repeat=3)  # read + write
    return flops, bandwidth


def model_config(args) -> Qwen3MoeConfig:
    return Qwen3MoeConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=4 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.hidden // 64,
        num_key_value_heads=max(1, args.hidden // 256),
        head_dim=64,
        num_experts=args.experts,
        num_experts_per_tok=args.top_k,
        moe_intermediate_size=args.expert_width,
        norm_topk_prob=True,
        max_position_embeddings=args.prompt + args.max_response + 8,
        tie_word_embeddings=False,
        eos_token_id=args.vocab - 1,
        pad_token_id=0,
    )


def parameter_counts(model, config: Qwen3MoeConfig) -> tuple[int, int]:
    """(total parameters, active non-embedding parameters per token)."""
    total = sum(p.numel() for p in model.parameters())
    expert = 3 * config.hidden_size * config.moe_intermediate_size
    idle = (config.num_experts - config.num_experts_per_tok) * expert * config.num_hidden_layers
    return total, total - idle - model.get_input_embeddings().weight.numel()


def model_flops(active: int, config: Qwen3MoeConfig, lengths: list[int]) -> float:
    """Training FLOPs (forward + backward) of rows of ``lengths`` tokens: 6 x active parameters per
    token, plus causal attention (QK^T and PV: 2 x 2 x d FLOPs per query-key pair, L^2/2 pairs, x3)."""
    width = config.num_attention_heads * config.head_dim
    attention = sum(3 * 4 * width * n * n / 2 for n in lengths) * config.num_hidden_layers
    return 6 * active * sum(lengths) + attention


def synthetic_rollouts(args, config: Qwen3MoeConfig, seed: int = 0) -> RolloutBatch:
    """P prompts x G responses with random tokens, lengths uniform in [min, max], rewards 0/1 and
    random routes (distinct top-k experts per token and MoE layer), as a rollout engine returns them."""
    g = torch.Generator().manual_seed(seed)
    samples = []
    for _ in range(args.prompts):
        prompt = torch.randint(1, config.vocab_size - 1, (args.prompt,), generator=g).tolist()
        for _ in range(args.group):
            n = int(torch.randint(args.min_response, args.max_response + 1, (1,), generator=g))
            response = torch.randint(1, config.vocab_size - 1, (n,), generator=g).tolist()
            routes = torch.rand(args.prompt + n - 1, config.num_hidden_layers, config.num_experts, generator=g)
            routes = routes.argsort(-1)[..., : config.num_experts_per_tok].to(torch.int16).numpy()
            samples.append(Sample(prompt, response, (-torch.rand(n, generator=g)).tolist(), routes))
    rewards = torch.randint(0, 2, (len(samples),), generator=g).float()
    return RolloutBatch.from_samples(samples, rewards, args.group, 0, temperature=1.0, policy_version=0)


class SyntheticRollouts(L.LightningDataModule):
    """The same rollout batch every step (marked as generated by the current weights), carrying ``plan``, the
    step's geometry. ``engine`` is a real HF engine that is never started: Routing Replay R3 asks it for routes,
    the batch has them."""

    def __init__(self, batch: RolloutBatch, steps: int, plan: BatchPlan) -> None:
        super().__init__()
        self.batch, self.steps, self.plan, self.engine = batch, steps, plan, HFEngine()

    def train_dataloader(self):
        return torch.utils.data.DataLoader(range(self.steps), batch_size=None)

    def on_before_batch_transfer(self, batch, dataloader_idx: int) -> RolloutBatch:
        batch = replace(self.batch, policy_version=self.trainer.global_step)
        batch.plan = self.plan
        return batch


class StepTimes(L.Callback):
    """The ``time/pi_old`` and ``time/update`` seconds of every step."""

    def __init__(self) -> None:
        self.pi_old, self.update = [], []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        self.pi_old.append(float(trainer.callback_metrics["time/pi_old"]))
        self.update.append(float(trainer.callback_metrics["time/update"]))


def random_model(args, config: Qwen3MoeConfig):
    """The benchmark's model with seed-0 random weights, bfloat16, and the directory it is saved to."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(
        config, dtype=torch.bfloat16, experts_implementation=args.experts_implementation
    )
    model_dir = tempfile.mkdtemp()
    model.save_pretrained(model_dir)
    model.generation_config.save_pretrained(model_dir)
    return model, model_dir


def quiet_trainer(**options) -> L.Trainer:
    """A Lightning trainer for timing: no logger, checkpoints, progress bar, summary or validation."""
    return L.Trainer(
        accelerator="auto",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        **options,
    )


def fit_synthetic(
    model_dir: str,
    batch: RolloutBatch,
    args,
    callbacks=(),
    mini_batches: int = 1,
    devices: int = 1,
    strategy: str = "ddp",
    **runtime,
) -> tuple[StepTimes, L.Trainer]:
    """``args.steps`` MiniRL steps on ``batch`` (in every process) through Lightning, with ``strategy``
    ("ddp" or "fsdp2") on several devices; the ``time/`` seconds of every step and the trainer.
    ``runtime``: further ``ModelRuntime`` switches (they override those taken from ``args``)."""
    settings = {
        "experts_implementation": args.experts_implementation,
        "gradient_checkpointing": args.gradient_checkpointing,
        "logprob_chunk_size": args.chunk,
    }
    module = PolicyModule(
        model_dir,
        optimizer=lambda params: torch.optim.AdamW(params, lr=1e-6),
        dtype="bfloat16",
        runtime=ModelRuntime(**(settings | runtime)),
    )
    plan = BatchPlan(
        batch.num_rows * devices // batch.group_size,  # every process trains on a copy of ``batch``
        batch.group_size,
        mini_batch_size=batch.num_rows * devices // mini_batches,  # responses over all processes
        micro_batch_size=args.micro,
        processes=devices,
    )
    times = StepTimes()
    trainer = quiet_trainer(
        max_steps=args.steps * mini_batches,
        devices=devices,
        strategy=(FSDP2Strategy() if strategy == "fsdp2" else "ddp") if devices > 1 else "auto",
        use_distributed_sampler=False,  # every process walks the same steps
        callbacks=[times, *callbacks],
    )
    trainer.fit(module, datamodule=SyntheticRollouts(batch, args.steps, plan))
    return times, trainer


def stable_rl_step(
    model_dir: str, batch: RolloutBatch, args, callbacks=(), mini_batches: int = 1, **runtime
) -> tuple[float, float, float]:
    """Median (pi_old, update) seconds per step of stable-rl's MiniRL step, and peak GPU memory (GB)."""
    reset_peak()
    times, trainer = fit_synthetic(model_dir, batch, args, callbacks, mini_batches, **runtime)
    peak = peak_gb()
    del trainer
    free()
    return statistics.median(times.pi_old[1:]), statistics.median(times.update[1:]), peak


def raw_forward_backward(model, parts: list[RolloutBatch], padding_mask: bool = True) -> None:
    """What a plain HF training step computes: full logits, float32 log-softmax, the response tokens'
    log-probs summed, backward; no optimizer (stable-rl's timed update includes its gradient norm and AdamW
    step: ``gpu_moe_mfu.optimizer_seconds`` measures those apart). ``padding_mask=False``: the
    causal mask alone (exact for right-padded rows, see ``stable_rl.policy.logprobs.sequence_logprobs``)."""
    for part in parts:
        mask = part.attention_mask if padding_mask else None
        logits = model(input_ids=part.input_ids, attention_mask=mask).logits  # [m, L, V]
        logprobs = logits[:, :-1].float().log_softmax(-1).gather(-1, part.input_ids[:, 1:, None])[..., 0]
        (logprobs * part.response_mask[:, 1:]).sum().backward()
        del logits, logprobs
    model.zero_grad(set_to_none=True)


def logprob_memory(args, device: str) -> list[tuple[str, float, float]]:
    """(method, peak GB above inputs, seconds) of log-prob + entropy forward and backward of
    ``args.logprob_tokens`` tokens through the LM head."""
    g = torch.Generator(device=device).manual_seed(0)
    hidden = torch.randn(args.logprob_tokens, args.hidden, device=device, dtype=torch.bfloat16, generator=g)
    weight = torch.randn(args.vocab, args.hidden, device=device, dtype=torch.bfloat16, generator=g) * 0.02
    targets = torch.randint(0, args.vocab, (args.logprob_tokens,), device=device, generator=g)
    hidden.requires_grad_(True)
    weight.requires_grad_(True)

    def full():
        logits = hidden.float() @ weight.float().T  # [N, V] float32
        logp = logits.log_softmax(-1)
        entropy = -(logp.exp() * logp).sum(-1).detach()
        logp.gather(-1, targets[:, None]).sum().backward()
        return entropy

    def chunked():
        logp, _ = token_logprobs_and_entropy(hidden, weight, targets, chunk_size=args.chunk)
        logp.sum().backward()

    rows = []
    for name, fn in (("full float32 logits", full), (f"chunked ({args.chunk} tokens), stable-rl", chunked)):
        fn()  # warm-up
        hidden.grad = weight.grad = None
        free()
        base = torch.cuda.memory_allocated() if device == "cuda" else 0
        reset_peak()
        start = time.perf_counter()
        fn()
        sync()
        elapsed = time.perf_counter() - start
        rows.append((name, (peak_bytes() - base) / 1e9, elapsed))
        hidden.grad = weight.grad = None
    return rows


def generation(
    model_dir: str, args, config: Qwen3MoeConfig, total: int, bandwidth: float
) -> tuple[float, float, int, str]:
    """(HF engine tokens/s, memory-bandwidth floor tokens/s, sequences, experts kernel) for P x G responses."""
    engine = HFEngine(
        max_new_tokens=args.generate_tokens, dtype="bfloat16", seed=0, cache_implementation=args.generate_cache
    )
    engine.start(model_dir, args.prompt + args.generate_tokens)
    kernel = engine.model.config._experts_implementation
    g = torch.Generator().manual_seed(1)
    prompts = [
        torch.randint(1, config.vocab_size - 1, (args.prompt,), generator=g).tolist() for _ in range(args.prompts)
    ]
    engine.generate(prompts[:1], 2, step=0)  # warm-up
    sync()
    start = time.perf_counter()
    samples = engine.generate(prompts, args.group, step=1)
    sync()
    elapsed = time.perf_counter() - start
    engine.close()
    free()
    tokens = sum(len(s.response_ids) for s in samples)
    batch, steps = len(samples), max(len(s.response_ids) for s in samples)
    kv = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * 2  # bytes per cached token
    mean_context = args.prompt + steps / 2
    step_bytes = 2 * total + batch * mean_context * kv  # all weights (every expert is hit at batch 64) + KV cache
    return tokens / elapsed, batch / (step_bytes / bandwidth), batch, kernel


def reset_peak() -> None:
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def peak_bytes() -> int:
    return torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0


def peak_gb() -> float:
    return peak_bytes() / 1e9


def free() -> None:
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--experts", type=int, default=64)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--expert-width", type=int, default=384)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=256, help="prompt tokens")
    parser.add_argument("--min-response", type=int, default=1024)
    parser.add_argument("--max-response", type=int, default=4096)
    parser.add_argument("--micro", type=int, default=8, help="stable-rl's micro_batch_size (rows per forward/backward)")
    parser.add_argument(
        "--raw-micro", type=int, default=4, help="rows per forward/backward of the raw model (full logits)"
    )
    parser.add_argument("--experts-implementation", default="grouped_mm")
    parser.add_argument(
        "--gradient-checkpointing", action="store_true", help="stable-rl recomputes layers in the backward"
    )
    parser.add_argument("--chunk", type=int, default=1024, help="stable-rl's logprob_chunk_size")
    parser.add_argument(
        "--steps",
        type=int,
        default=3,
        help="steps per stable-rl run, the first left out (raw: a warm-up, then this many)",
    )
    parser.add_argument("--logprob-tokens", type=int, default=16384)
    parser.add_argument("--generate-tokens", type=int, default=512)
    parser.add_argument("--generate-cache", default=None, help="HFEngine cache_implementation, e.g. static")
    parser.add_argument(
        "--skip", nargs="*", default=[], choices=["raw", "update", "replay", "offpolicy", "memory", "generate"]
    )
    return parser


def main() -> None:
    args = parser().parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    peak = next((v for k, v in PEAK_BF16.items() if k in name), float("nan"))
    matmul, bandwidth = hardware(device)
    print(
        f"\n{name}, torch {torch.__version__}: bf16 matmul {matmul / 1e12:.0f} TFLOP/s measured "
        f"(dense peak {peak / 1e12:.0f}), memory bandwidth {bandwidth / 1e12:.2f} TB/s measured\n"
    )

    config = model_config(args)
    model, model_dir = random_model(args, config)
    total, active = parameter_counts(model, config)
    batch = synthetic_rollouts(args, config)
    lengths = batch.attention_mask.sum(-1).tolist()
    tokens, flops = sum(lengths), model_flops(active, config, lengths)
    print(
        f"model: {total / 1e9:.2f}B parameters, {active / 1e9:.2f}B active non-embedding; batch {batch.num_rows} rows, "
        f"{tokens} tokens ({batch.input_ids.numel()} padded), {flops / 1e12:.0f} TFLOP per fwd+bwd\n"
    )

    rows = []  # (what, seconds per batch, peak GB)

    def row(what: str, secs: float, gb: float) -> None:
        rows.append((what, secs, gb))

    if "raw" not in args.skip:
        model.to(device).train()
        on = replace(
            batch, **{k: getattr(batch, k).to(device) for k in ("input_ids", "attention_mask", "response_mask")}
        )
        in_order = [part.trimmed() for part in on.split(args.raw_micro)]
        by_length = [part for _, part in on.length_sorted_parts(args.raw_micro)]
        for order, parts in (("batch order", in_order), ("length-sorted", by_length)):
            what = f"raw HF fwd+bwd, {args.raw_micro} rows per pass, {order}"
            try:
                reset_peak()
                secs = seconds(lambda parts=parts, model=model: raw_forward_backward(model, parts), repeat=args.steps)
                row(what, secs, peak_gb())
            except torch.OutOfMemoryError:
                model.zero_grad(set_to_none=True)
                free()
                row(f"{what} (out of memory)", math.nan, peak_gb())
    model.cpu()
    del model
    free()

    variants = [] if "update" in args.skip else [("stable-rl MiniRL, N=1", [], 1)]
    if "replay" not in args.skip:
        variants += [
            ("stable-rl MiniRL + R2", [RoutingReplay("R2")], 1),
            ("stable-rl MiniRL + R3", [RoutingReplay("R3", diagnostics=False)], 1),
        ]
    if "offpolicy" not in args.skip:
        variants += [("stable-rl MiniRL, N=4", [], 4)]
    for what, callbacks, n in variants:
        pi_old, update, gb = stable_rl_step(model_dir, batch, args, callbacks, n)
        row(f"{what}: update", update, gb)
        row(f"{what}: pi_old + update", pi_old + update, gb)

    print("| step | s per batch | tokens/s | MFU | vs raw (length-sorted) | measured/FLOP floor | peak GB |")
    print("|---|---|---|---|---|---|---|")
    reference = next((s for w, s, _ in rows if w.endswith("length-sorted")), math.nan)
    floor = flops / matmul
    for what, secs, gb in rows:
        print(
            f"| {what} | {secs:.3f} | {tokens / secs:,.0f} | {flops / secs / peak:.1%} | {reference / secs:.2f}x "
            f"| {secs / floor:.1f}x | {gb:.1f} |"
        )
    print(
        f"\nFLOP floor: {floor:.3f} s per batch at the measured matmul rate. MFU over the {peak / 1e12:.0f} TFLOP/s dense peak."
    )
    base = next((s for w, s, _ in rows if w == "stable-rl MiniRL, N=1: pi_old + update"), math.nan)
    for mode in ("R2", "R3"):
        secs = next((s for w, s, _ in rows if w == f"stable-rl MiniRL + {mode}: pi_old + update"), math.nan)
        print(f"Routing Replay {mode} overhead: {secs / base - 1:+.1%} of the step (pi_old + update)")

    if "memory" not in args.skip:
        print(f"\nLog-prob + entropy of {args.logprob_tokens} tokens, vocab {args.vocab}, forward + backward:\n")
        print("| method | peak GB above inputs | s |")
        print("|---|---|---|")
        for method, gb, secs in logprob_memory(args, device):
            print(f"| {method} | {gb:.2f} | {secs:.3f} |")

    if "generate" not in args.skip:
        rate, floor_rate, sequences, kernel = generation(model_dir, args, config, total, bandwidth)
        print(
            f"\nHF engine generation, {sequences} sequences x up to {args.generate_tokens} tokens (bf16, experts {kernel}, cache {args.generate_cache or 'dynamic'}): "
            f"{rate:,.0f} tokens/s; memory-bandwidth floor {floor_rate:,.0f} tokens/s; measured/floor {floor_rate / rate:.1f}x slower"
        )


if __name__ == "__main__":
    main()
