"""The mismatch dial's levels (``weight_noise``, ``stable_rl.rollout.weight_noise``): how far each sigma moves the
rollout engine from the training policy, measured without training.

For each sigma a real vLLM engine in float32 (equal to the float32 policy but for the dial) syncs the policy's
weights perturbed by sigma and samples G responses for P prompts of the quickstart's task; the float32 policy then
scores them. Prints per level: KL(mu_old || pi_old) per token (k3: mean of exp(-d) - 1 + d, d = log mu_old -
log pi_old), the per-response gap |sum_t d| (median and p90), the fraction of tokens whose pi_old/mu_old is beyond
MiniRL's IS cap 5 or below 1/5, and the reward of the engine's own samples (a level that is simply a worse sampler
shows here). The stability atlas's pilot chooses its levels from such a table.

    python -m benchmarks.mismatch_dial [--model data/tiny-qwen3-moe-sft-format] [--prompts 64 --group 8]
        [--sigmas 0 0.003 0.01 0.03 0.1 0.3]
"""

import argparse
import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from stable_rl.data import MathVerifier, PromptTemplate, ReasoningGymPrompts
from stable_rl.policy.logprobs import sequence_logprobs
from stable_rl.rollout import RolloutBatch, VLLMEngine


def measure(model: str, sigma: float, problems, prompt_ids, group: int, policy, verifier, tokenizer) -> dict:
    engine = VLLMEngine(max_new_tokens=64, dtype="float32", seed=0, weight_noise=sigma)
    engine.start(model, max_model_len=256)
    engine.sync(policy.state_dict().items(), version=0)
    samples = engine.generate(prompt_ids, group, step=0)
    engine.close()
    responses = [tokenizer.decode(s.response_ids, skip_special_tokens=True) for s in samples]
    rewards = verifier(responses, [p.answer for p in problems for _ in range(group)])
    batch = RolloutBatch.from_samples(samples, rewards, group, 0, 1.0, 0)
    with torch.no_grad():
        logprobs, _ = sequence_logprobs(policy, batch.input_ids, batch.attention_mask, batch.response_mask, 1.0)
    mask = batch.response_mask
    d = (batch.rollout_logprobs - logprobs) * mask  # [M, L] log mu_old - log pi_old
    per_response = d.sum(-1).abs()  # [M]
    return {
        "sigma": sigma,
        "k3": ((-d[mask]).exp() - 1 + d[mask]).mean().item(),
        "gap_median": per_response.median().item(),
        "gap_p90": per_response.quantile(0.9).item(),
        "beyond_cap": (d[mask].abs() > math.log(5)).float().mean().item(),
        "reward": rewards.float().mean().item(),
        "length": mask.sum(-1).float().mean().item(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="data/tiny-qwen3-moe-sft-format")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--sigmas", type=float, nargs="+", default=[0.0, 0.003, 0.01, 0.03, 0.1, 0.3])
    args = parser.parse_args()

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    difficulty = dict(min_terms=2, max_terms=3, min_digits=1, max_digits=2)  # recipes/minirl.yaml's task
    problems = ReasoningGymPrompts(
        ["basic_arithmetic", "chain_sum"], size=args.prompts // 2, seed=1_000_000, **difficulty
    ).load()
    prompt_ids = [PromptTemplate().encode(tokenizer, p.question) for p in problems]
    policy = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    verifier = MathVerifier()
    rows = [measure(args.model, s, problems, prompt_ids, args.group, policy, verifier, tokenizer) for s in args.sigmas]
    verifier.close()

    print(
        f"\n{args.model}: {len(prompt_ids)} prompts x {args.group}, vLLM float32 engine + weight_noise, policy float32"
    )
    print(
        "| sigma | KL k3 / token | per-response gap, median (nats) | p90 | tokens beyond cap 5 | engine's reward | length |"
    )
    print("|---" * 7 + "|")
    for r in rows:
        print(
            f"| {r['sigma']:g} | {r['k3']:.2e} | {r['gap_median']:.3f} | {r['gap_p90']:.3f} "
            f"| {r['beyond_cap']:.4f} | {r['reward']:.3f} | {r['length']:.1f} |"
        )


if __name__ == "__main__":
    main()
