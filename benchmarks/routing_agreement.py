"""How far the rollout engine's routing is from the training engine's, and what R3 does to the gap.

For each rollout engine setting (vLLM in float32 / bfloat16, the HF engine in bfloat16, with simulated
FP8, and with each rung of the simulated mismatch ladder of ``stable_rl.rollout.fp8``: FP8 with
per-tensor scales, e5m2, FP4, FP8 with the routers rounded too, FP8 with an FP8 KV cache): sample G
responses for P held-out prompts with routes returned, then score them with the float32 training
policy twice: routing freely and replaying the engine's routes (R3). Prints a table of routing
agreement (tokens whose top-k expert set matches, overall and per MoE layer) and, without and with replay, of the training-inference gap d = log mu_old - log pi_old on response tokens:
KL(mu_old || pi_old) estimated as mean(d) (k1, what ``train/kl`` logs: unbiased, noisy, signed) and as
mean(exp(-d) - 1 + d) (k3: unbiased, never negative, lower variance), mean |d| and max |d|; then the
responses' mean length and the training policy's mean entropy on them (the gap grows with it).

    python -m benchmarks.routing_agreement [--model data/tiny-qwen3-moe-sft] [--prompts 64 --group 8]
        [--settings vllm-float32 vllm-bfloat16 hf-bfloat16 hf-float32-fp8 hf-bfloat16-fp8 ...] [--minirl-prompts]
"""

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from stable_rl.data import PromptTemplate, ReasoningGymPrompts
from stable_rl.policy.logprobs import sequence_logprobs
from stable_rl.rollout import HFEngine, RolloutBatch, VLLMEngine
from stable_rl.routing import RouterHooks, routed_positions, routes_match


def score(policy, batch: RolloutBatch, routes=None, micro: int = 64):
    """log pi_old [M, L], its entropy [M, L] and the routers' own routes, free (``routes`` None) or
    replaying ``routes``."""
    hooks = RouterHooks(policy)
    logprobs, entropy, own = [], [], []
    for part in batch.split(micro):
        context = hooks.record(part.input_ids) if routes is None else hooks.replay(part.routes, part.attention_mask)
        with torch.no_grad(), context:
            lp, h = sequence_logprobs(
                policy, part.input_ids, part.attention_mask, part.response_mask, batch.temperature
            )
        logprobs.append(lp)
        entropy.append(h)
        own.append(hooks.own)
    return torch.cat(logprobs), torch.cat(entropy), torch.cat(own)


def hf(dtype: str = "bfloat16", **low_precision):
    """An HF engine setting; ``low_precision``: its quantization, quantize_router, kv_cache_dtype."""
    return lambda: HFEngine(max_new_tokens=64, dtype=dtype, return_routes=True, **low_precision)


SETTINGS = {
    "vllm-float32": lambda: VLLMEngine(max_new_tokens=64, dtype="float32", return_routes=True),
    "vllm-bfloat16": lambda: VLLMEngine(max_new_tokens=64, dtype="bfloat16", return_routes=True),
    "hf-bfloat16": hf(),
    "hf-float32-fp8": hf("float32", quantization="fp8_per_channel"),
    "hf-bfloat16-fp8": hf(quantization="fp8_per_channel"),
    # the mismatch ladder (recipes/paper/mismatch), each rung in bfloat16
    "hf-bfloat16-fp8-per-tensor": hf(quantization="fp8_per_tensor"),
    "hf-bfloat16-e5m2": hf(quantization="e5m2"),
    "hf-bfloat16-fp4": hf(quantization="fp4"),
    "hf-bfloat16-fp8-router": hf(quantization="fp8_per_channel", quantize_router=True),
    "hf-bfloat16-fp8-kv": hf(quantization="fp8_per_channel", kv_cache_dtype="fp8"),
}


def measure(model: str, setting: str, prompt_ids, group: int, policy, sync: bool = True) -> dict:
    engine = SETTINGS[setting]()
    engine.start(model, max_model_len=256)
    if sync:  # as in training, where the policy's weights are loaded into the engine before every rollout
        engine.sync(policy.state_dict().items(), version=0)
    start = time.perf_counter()
    samples = engine.generate(prompt_ids, group, step=0)
    seconds = time.perf_counter() - start
    engine.close()
    batch = RolloutBatch.from_samples(samples, torch.zeros(len(samples)), group, 0, 1.0, 0)
    free, entropy, own = score(policy, batch)
    replayed, _, _ = score(policy, batch, routes=batch.routes)
    mask, needed = batch.response_mask, routed_positions(batch.attention_mask)
    same = routes_match(own, batch.routes)[needed].float()  # [tokens, layers]
    gap = {name: (batch.rollout_logprobs - lp)[mask] for name, lp in (("free", free), ("r3", replayed))}
    return {
        "setting": setting,
        "tokens": int(needed.sum()),
        "agreement": same.mean().item(),
        "per_layer": same.mean(0).tolist(),
        **{f"kl_{k}": v.mean().item() for k, v in gap.items()},
        **{f"k3_{k}": ((-v).exp() - 1 + v).mean().item() for k, v in gap.items()},
        **{f"abs_{k}": v.abs().mean().item() for k, v in gap.items()},
        **{f"max_{k}": v.abs().max().item() for k, v in gap.items()},
        "length": mask.sum(-1).float().mean().item(),
        "entropy": entropy[mask].mean().item(),
        "rollout_s": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="data/tiny-qwen3-moe-sft")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument(
        "--minirl-prompts",
        action="store_true",
        help="held-out prompts as easy as recipes/minirl.yaml's (2-3 terms of 1-2 digits), not reasoning-gym's "
        "default difficulty (2-6 terms of 1-4 digits)",
    )
    args = parser.parse_args()

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    difficulty = dict(min_terms=2, max_terms=3, min_digits=1, max_digits=2) if args.minirl_prompts else {}
    generators = ["basic_arithmetic", "chain_sum"]
    problems = ReasoningGymPrompts(generators, size=args.prompts // 2, seed=1_000_000, **difficulty).load()
    prompt_ids = [PromptTemplate().encode(tokenizer, p.question) for p in problems]
    policy = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    rows = [measure(args.model, setting, prompt_ids, args.group, policy) for setting in args.settings]

    prompts = "recipes/minirl.yaml's difficulty" if args.minirl_prompts else "default difficulty"
    print(f"\n{args.model}: {len(prompt_ids)} prompts ({prompts}) x {args.group}, training policy in float32")
    print(
        "| rollout engine | routed tokens | agreement (all layers) | per layer | KL k1 free | KL k1 R3 | KL k3 free | KL k3 R3 | mean abs free | mean abs R3 | max abs free | max abs R3 |"
    )
    print("|---" * 12 + "|")
    for r in rows:
        layers = " / ".join(f"{a:.3f}" for a in r["per_layer"])
        print(
            f"| {r['setting']} | {r['tokens']} | {r['agreement']:.4f} | {layers} | {r['kl_free']:.2e} | {r['kl_r3']:.2e} "
            f"| {r['k3_free']:.2e} | {r['k3_r3']:.2e} "
            f"| {r['abs_free']:.2e} | {r['abs_r3']:.2e} | {r['max_free']:.3f} | {r['max_r3']:.3f} |"
        )
    print("\n| rollout engine | mean response length | pi_old entropy | rollout s |")
    print("|---" * 4 + "|")
    for r in rows:
        print(f"| {r['setting']} | {r['length']:.1f} | {r['entropy']:.3f} | {r['rollout_s']:.0f} |")


if __name__ == "__main__":
    main()
