"""vLLM's FP8 KV cache (``VLLMEngine(kv_cache_dtype=...)``) against the float32 policy, plain and with the HF
engine's simulated FP8 KV cache (``use_fp8_kv_cache``: keys and values rounded to e4m3, scale 1.0): is the
simulation what this vLLM build computes? The same prompts (16 of the quickstart's held-out problems, 4 samples each) are
sampled by a float32 vLLM engine per ``kv_cache_dtype``; their tokens are scored by both policies.

    python benchmarks/vllm_kv_cache_fp8.py [--model data/tiny-qwen3-moe-sft-format] [--settings auto fp8 fp8_e5m2]
"""

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from stable_rl.data import ReasoningGymPrompts
from stable_rl.data.template import PromptTemplate
from stable_rl.policy.logprobs import sequence_logprobs
from stable_rl.rollout import RolloutBatch, VLLMEngine
from stable_rl.rollout.fp8 import use_fp8_kv_cache


def gaps(model, samples) -> tuple[float, float]:
    """Mean and max |log pi - log mu| over the samples' response tokens."""
    batch = RolloutBatch.from_samples(samples, torch.zeros(len(samples)), 4, 0, 1.0, 0)
    with torch.no_grad():
        logprobs, _ = sequence_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_mask, 1.0)
    gap = (logprobs - batch.rollout_logprobs)[batch.response_mask].abs()
    return gap.mean().item(), gap.max().item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="data/tiny-qwen3-moe-sft-format")
    parser.add_argument("--settings", nargs="+", default=["auto", "fp8", "fp8_e5m2"])
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    source = ReasoningGymPrompts(
        ["basic_arithmetic", "chain_sum"], size=8, seed=1000000, min_terms=2, max_terms=3, min_digits=1, max_digits=2
    )  # the quickstart's held-out generators: 8 of each
    prompts = [PromptTemplate().encode(tokenizer, row["question"]) for row in source.rows()]
    plain = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    simulated = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    use_fp8_kv_cache(simulated)
    print(f"\n{args.model}, float32 vLLM engines, 16 prompts x 4 samples of <= 64 tokens, temperature 1\n")
    print(
        "| vLLM kv_cache_dtype | response tokens | vs policy: mean / max \\|d log p\\| | vs simulated FP8 KV: mean / max |"
    )
    print("|---|---|---|---|")
    for setting in args.settings:
        engine = VLLMEngine(max_new_tokens=64, seed=0, kv_cache_dtype=setting)
        try:
            engine.start(args.model, 256)
            samples = engine.generate(prompts, group_size=4, step=0)
        finally:
            engine.close()
        tokens = sum(len(s.response_ids) for s in samples)
        (pm, px), (sm, sx) = gaps(plain, samples), gaps(simulated, samples)
        print(f"| {setting} | {tokens} | {pm:.2e} / {px:.2e} | {sm:.2e} / {sx:.2e} |", flush=True)


if __name__ == "__main__":
    main()
