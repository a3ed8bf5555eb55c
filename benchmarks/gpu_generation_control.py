"""stable-rl's rollout against a standalone vLLM control, side by side (issue 45: at least 0.9x of the control, and
at 256 sequences at least 30% of the card's floor).

    PYTHONPATH=/tmp/site:src:benchmarks python3 -m benchmarks.gpu_generation_control   # one CUDA GPU, vLLM; --help

The random 1.25B Qwen3-MoE of ``benchmarks/gpu_update.py`` (bfloat16). Two engines live at once on the GPU, each
with ``--memory`` of it: ``VLLMEngine`` in this process with its GPU defaults (CUDA graphs, one seed per call,
no sleep between calls here), and the control, vLLM's own ``LLM.generate`` in a fresh process with its engine core
in a process of its own (``benchmarks/_vllm_control.py``: vLLM's defaults, the same sampling). For each batch
size B (64 and 256 sequences of ``--prompt`` random prompt tokens and up to ``--response`` new ones), ``--rounds``
rounds of ``--calls`` calls, a call of the control then one of stable-rl on the same prompts, interleaved so that
both see the same machine; the table gives generated tokens per second (a round's tokens over its seconds), median
and range over rounds, the ratio of medians, and stable-rl's
median against the floor of the measured card (``gpu_colocated.floor_seconds``). Seconds are the generate
call's own (the control's measured inside its process, without the pipe).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import gpu_colocated
import gpu_update
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from benchmarks._random_moe import random_model_dir
from stable_rl.rollout import VLLMEngine


class Control:
    """The standalone vLLM process: one JSON request a line, one answer a line."""

    def __init__(self) -> None:
        script = Path(__file__).with_name("_vllm_control.py")
        self.process = subprocess.Popen(
            [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )

    def ask(self, request: dict) -> dict:
        self.process.stdin.write(json.dumps(request) + "\n")
        answer = self.process.stdout.readline()
        if not answer:
            raise RuntimeError(f"the vLLM control ended (exit code {self.process.wait()}): see its output above")
        return json.loads(answer)

    def close(self) -> None:
        """Ends the process: on a closed stdin it returns; killed if it has not within 2 minutes or has failed."""
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.process.kill()


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed_generate(engine: VLLMEngine, prompts: list[list[int]], step: int) -> dict:
    sync()
    start = time.perf_counter()
    samples = engine.generate(prompts, 1, step=step)
    sync()
    return {"tokens": sum(len(s.response_ids) for s in samples), "seconds": time.perf_counter() - start}


def spread(rates: list[float]) -> str:
    return f"{statistics.median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f})"


def parser() -> argparse.ArgumentParser:
    parser = gpu_update.parser()
    parser.description = __doc__
    parser.add_argument("--response", type=int, default=1024, help="max response tokens")
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 256], help="sequences per call")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per batch size (the spread is over rounds)")
    parser.add_argument("--calls", type=int, default=3, help="calls of each side per round, interleaved")
    parser.add_argument("--memory", type=float, default=0.35, help="gpu_memory_utilization of each engine")
    parser.add_argument("--model", help="an existing model directory instead of the random model (no floor)")
    return parser


def floor_rate(args, config, batch: int, hw) -> float:
    """The floor's tokens per second at full-length responses (``gpu_colocated.floor_seconds``)."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    total, active = gpu_update.parameter_counts(model, config)
    weight_bytes = 2 * (total - model.get_input_embeddings().weight.numel())
    return (
        batch
        * args.response
        / gpu_colocated.floor_seconds(config, weight_bytes, active, batch, args.prompt, args.response, hw)
    )


def main() -> None:
    args = parser().parse_args()
    import vllm

    length, widest = args.prompt + args.response, max(args.batches)
    hw = gpu_update.hardware("cuda") if torch.cuda.is_available() else None
    device = torch.cuda.get_device_name() if hw else "CPU"
    print(f"\n{device}, vLLM {vllm.__version__}" + (f", floor from {hw[1] / 1e12:.2f} TB/s" if hw else ""), flush=True)
    if args.model:
        model_dir, config = args.model, AutoConfig.from_pretrained(args.model)
    else:
        config, model_dir = gpu_update.model_config(args), random_model_dir(args, length)
    control = Control()
    try:
        started = control.ask(
            {
                "start": {
                    "model": model_dir,
                    "dtype": "bfloat16",
                    "max_model_len": length,
                    "gpu_memory_utilization": args.memory,
                    "max_num_seqs": widest,
                    "seed": 0,
                }
            }
        )["started"]
        engine = gpu_colocated.generation_engine(args.response, args.memory, widest)
        start = time.perf_counter()
        engine.start(model_dir, length)
        print(f"started: control {started:.0f} s, stable-rl {time.perf_counter() - start:.0f} s", flush=True)
        warm = gpu_colocated.prompts_of(8, args.prompt, config.vocab_size, 0)
        control.ask({"generate": {"prompts": warm, "max_tokens": args.response}})
        timed_generate(engine, warm, 0)
        rows = []
        for batch in args.batches:
            rates: dict[str, list[float]] = {"control": [], "stable-rl": []}
            for round_ in range(args.rounds):
                totals = {side: [0, 0.0] for side in rates}  # tokens, seconds over the round's calls
                for call in range(args.calls):
                    seed = 1000 * batch + args.calls * round_ + call
                    prompts = gpu_colocated.prompts_of(batch, args.prompt, config.vocab_size, seed)
                    control_run = control.ask({"generate": {"prompts": prompts, "max_tokens": args.response}})
                    ours = timed_generate(engine, prompts, seed)
                    for side, result in (("control", control_run), ("stable-rl", ours)):
                        totals[side][0] += result["tokens"]
                        totals[side][1] += result["seconds"]
                for side, (tokens, seconds) in totals.items():
                    rates[side].append(tokens / seconds)
                print(
                    f"  B={batch} round {round_}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in rates.items()),
                    flush=True,
                )
            rows.append((batch, rates, floor_rate(args, config, batch, hw) if hw else None))
        engine.close()
    finally:
        control.close()
    print(
        f"\nGeneration, {args.prompt}-token prompts, up to {args.response} new tokens, bfloat16, {args.rounds} rounds of {args.calls} calls:\n"
    )
    print("| sequences | control tokens/s | stable-rl tokens/s | stable-rl / control | stable-rl / floor |")
    print("|---|---|---|---|---|")
    for batch, rates, floor in rows:
        ours = statistics.median(rates["stable-rl"])
        of_floor = f"{ours / floor:.0%}" if floor else "-"
        print(
            f"| {batch} | {spread(rates['control'])} | {spread(rates['stable-rl'])} | "
            f"{ours / statistics.median(rates['control']):.2f} | {of_floor} |"
        )


if __name__ == "__main__":
    main()
