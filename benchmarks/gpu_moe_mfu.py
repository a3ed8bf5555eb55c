"""MFU of the MoE update with each kernel option: the raw HF model and stable-rl's update side by side.

    # on one CUDA GPU (H100/H200), from the project root, with liger-kernel's wheel in .gpu/mfu (~8 min):
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/mfu/*.whl
    PYTHONPATH=/tmp/site:src python3 -m benchmarks.gpu_moe_mfu --out moe_mfu.md

A random Qwen3-MoE with the 30B-A3B-like layer shape (hidden 2048, 128 experts top-8, expert width 768,
6 layers, vocab 151,936), bfloat16, on the synthetic rollouts of ``benchmarks/gpu_update.py`` (8 prompts x 8
responses of 256 + 1k-4k tokens). For each option combination (``--combos``; Liger needs the wheel above):

- raw: the HF model with the same options, forward + full logits + float32 log-softmax + backward on
  length-sorted passes of ``--raw-micro`` rows (``gpu_update.raw_forward_backward``), median of ``--steps``
  after a warm-up;
- stable-rl: the on-policy MiniRL step through Lightning (pi_old + update, AdamW), median of ``--steps`` - 1
  steps after the first;

and prints (and appends to ``--out`` after each combination) seconds, MFU (6 x active non-embedding
parameters + causal attention, per token, over the card's dense bf16 peak) and stable-rl / raw throughput,
also against the raw pass plus the optimizer work stable-rl's update times and the raw pass does not
(gradient norm, clipping, AdamW: ``optimizer_seconds``, measured once).
Options (``stable_rl.kernels``, ``HFPolicyModule``): ``experts_implementation: liger`` (Liger's fused MoE,
autotuning off unless ``--liger-autotune``: each kernel would benchmark 16-32 configs on first use),
``kernels: liger`` (Liger's RMSNorm), ``compile_layers``, ``compile_logprobs`` (stable-rl's head only: its
raw row is the baseline's), ``padding_mask: false`` (raw: called without the padding mask too) and
``packed_sequences`` with ``attn_implementation: flex_attention`` (stable-rl's packing only: the raw model
runs flex attention on the padded rows), ``keep_head_grad`` (stable-rl's head only: no recomputed logits).
"""

import os
import time
import traceback
from dataclasses import replace

import torch
from gpu_update import (
    PEAK_BF16,
    free,
    hardware,
    model_config,
    model_flops,
    parameter_counts,
    parser,
    peak_gb,
    random_model,
    raw_forward_backward,
    reset_peak,
    seconds,
    stable_rl_step,
    synthetic_rollouts,
)
from transformers import AutoModelForCausalLM

from stable_rl.kernels import LIGER, compile_decoder_layers, register_liger_experts, use_liger_norms

COMBOS = {
    "grouped_mm": {},
    "liger experts": {"experts_implementation": LIGER},
    "liger norms": {"kernels": LIGER},
    "compile layers": {"compile_layers": True},
    "compile logprobs": {"compile_logprobs": True},
    "no padding mask": {"padding_mask": False},
    # The combinations keep torch's grouped GEMM experts: Liger's fused MoE measured no faster on an H100
    # (benchmarks/RESULTS.md), and compile_layers compiles only grouped_mm experts.
    "all (compiled norms)": {"compile_layers": True, "compile_logprobs": True, "padding_mask": False},
    "all (liger norms)": {"kernels": LIGER, "compile_logprobs": True, "padding_mask": False},
    # the head keeps d log p / d logits from its forward instead of recomputing the logits in the backward
    # (stable-rl only: the raw model keeps its full logits anyway)
    "kept head gradient": {"keep_head_grad": True},
    "all + kept head gradient": {
        "compile_layers": True,
        "compile_logprobs": True,
        "padding_mask": False,
        "keep_head_grad": True,
    },
    # packed rows compute no padding; flex attention skips the attention across their sequences (the raw model
    # runs flex attention on the padded rows)
    "packed (flex attention)": {"attn_implementation": "flex_attention", "packed_sequences": True},
    "all packed (flex attention)": {
        "attn_implementation": "flex_attention",
        "packed_sequences": True,
        "compile_layers": True,
        "compile_logprobs": True,
    },
}
RAW_OPTIONS = ("experts_implementation", "attn_implementation", "kernels", "compile_layers", "padding_mask")


def raw_model(model_dir: str, options: dict, device: str):
    """The saved random model in bfloat16 with the raw-model side of ``options``."""
    experts = options.get("experts_implementation", "grouped_mm")
    if experts == LIGER:
        register_liger_experts()
    attention = {"attn_implementation": options["attn_implementation"]} if "attn_implementation" in options else {}
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.bfloat16, experts_implementation=experts, **attention
    )
    if options.get("kernels") == LIGER:
        use_liger_norms(model)
    if options.get("compile_layers"):
        compile_decoder_layers(model)
    return model.to(device).train()


def raw_seconds(model_dir: str, batch, args, options: dict, device: str) -> tuple[float, float]:
    """(median seconds of the raw forward + backward of the batch, peak GB)."""
    model = raw_model(model_dir, options, device)
    on = replace(batch, **{k: getattr(batch, k).to(device) for k in ("input_ids", "attention_mask", "response_mask")})
    parts = [part for _, part in on.length_sorted_parts(args.raw_micro)]
    reset_peak()
    secs = seconds(lambda: raw_forward_backward(model, parts, options.get("padding_mask", True)), args.steps)
    return secs, peak_gb()


def optimizer_seconds(model_dir: str, steps: int, device: str) -> float:
    """Median seconds of what stable-rl's update runs after its backward and the raw pass does not: the
    gradient norm, clipping and one step of the benchmark's AdamW, over every parameter (gradients set)."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).to(device)
    for param in model.parameters():
        param.grad = torch.full_like(param, 1e-3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)  # gpu_update.fit_synthetic's

    def step() -> None:  # PolicyModule's: the logged norm, clipping by that norm, then AdamW
        params = list(model.parameters())
        norm = torch.nn.utils.get_total_norm([p.grad for p in params])
        torch.nn.utils.clip_grads_with_norm_(params, 1.0, norm)
        optimizer.step()

    return seconds(step, steps)  # the model and the optimizer's state go with this frame


def main() -> None:
    cli = parser()
    cli.description = __doc__
    cli.set_defaults(hidden=2048, layers=6, experts=128, top_k=8, expert_width=768, steps=3)
    cli.add_argument("--combos", nargs="*", default=list(COMBOS), choices=list(COMBOS))
    cli.add_argument("--out", default="moe_mfu.md", help="markdown file the rows are appended to as they come")
    cli.add_argument("--liger-autotune", action="store_true", help="let Liger's fused MoE autotune its kernels")
    args = cli.parse_args()
    if not args.liger_autotune:
        os.environ.setdefault("LIGER_FUSED_MOE_AUTOTUNE", "0")  # read when liger_kernel is first imported
    device = "cuda" if torch.cuda.is_available() else "cpu"
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    peak = next((v for k, v in PEAK_BF16.items() if k in name), float("nan"))
    matmul, bandwidth = hardware(device)

    config = model_config(args)
    model, model_dir = random_model(args, config)
    total, active = parameter_counts(model, config)
    del model
    free()
    batch = synthetic_rollouts(args, config)
    lengths = batch.attention_mask.sum(-1).tolist()
    tokens, flops = sum(lengths), model_flops(active, config, lengths)

    def write(line: str) -> None:
        print(line, flush=True)
        with open(args.out, "a") as out:
            out.write(line + "\n")

    write(
        f"\n{name}, torch {torch.__version__}: bf16 matmul {matmul / 1e12:.0f} TFLOP/s measured (dense peak "
        f"{peak / 1e12:.0f}), {bandwidth / 1e12:.2f} TB/s. Model {total / 1e9:.2f}B parameters, {active / 1e9:.2f}B "
        f"active non-embedding; {tokens} tokens, {flops / 1e12:.0f} TFLOP per fwd+bwd; raw {args.raw_micro} rows "
        f"per pass, stable-rl micro-batches of {args.micro} rows, chunks of {args.chunk}\n"
    )
    optimizer = optimizer_seconds(model_dir, args.steps, device)
    free()
    write(
        f"The raw pass runs no optimizer; stable-rl's update does: gradient norm, clipping and AdamW take "
        f"{optimizer:.3f} s here (last column: stable-rl against the raw pass plus that)\n"
    )
    write(
        "| options | raw s | raw MFU | raw peak GB | stable-rl s | stable-rl MFU | stable-rl peak GB | stable-rl / raw "
        "throughput | stable-rl / (raw + optimizer) |"
    )
    write("|---|---|---|---|---|---|---|---|---|")
    raw_rows: dict[tuple, tuple[float, float]] = {}
    for combo in args.combos:
        options = COMBOS[combo]
        start = time.perf_counter()
        try:
            raw_key = tuple(sorted((k, v) for k, v in options.items() if k in RAW_OPTIONS))
            if raw_key not in raw_rows:
                raw_rows[raw_key] = raw_seconds(model_dir, batch, args, options, device)
            raw, raw_gb = raw_rows[raw_key]
            free()
            pi_old, update, gb = stable_rl_step(model_dir, batch, args, **options)
        except Exception as error:  # a combination that cannot run (no Liger, out of memory) leaves its row
            traceback.print_exc()
            failure = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
        else:
            failure = None
        free()  # after the except block, which holds the failed run's frames
        if failure:
            write(f"| {combo} | failed: {failure} ||||||||")
            continue
        secs = pi_old + update
        write(
            f"| {combo} | {raw:.3f} | {flops / raw / peak:.1%} | {raw_gb:.1f} | {secs:.3f} | {flops / secs / peak:.1%} "
            f"| {gb:.1f} | {raw / secs:.2f}x | {(raw + optimizer) / secs:.2f}x |"
        )
        print(f"  ({combo}: {time.perf_counter() - start:.0f} s with compilation and warm-up)", flush=True)


if __name__ == "__main__":
    main()
