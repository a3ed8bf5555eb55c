"""Upcycle SmolLM2-135M-Instruct into a Mixtral MoE (every MLP copied into E experts, a fresh top-k router).

    python data/make_smollm2.py                       # first, the dense model (data/smollm2-135m-instruct)
    python data/make_smollm2_moe.py --out data/smollm2-135m-moe --experts 8 --top-k 2 --noise 0.01 --seed 0

The MoE (692M parameters for 8 experts, about 214M active per token at top-2) keeps SmolLM2's
tokenizer and chat template; ``stable_rl.policy.upcycle`` says how it is made. At the end the script compares
it with the dense model on a few prompts (largest |logit difference|, mean KL, argmax agreement): float32
rounding for ``--noise 0``, the experts' perturbation otherwise. Deterministic for a seed; not committed (about
2.8 GB in float32): every machine makes its own.
"""

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from stable_rl.policy.upcycle import upcycle

PROMPTS = ["What is 2 + 3?", "The capital of France is", "Work out 17 * 23 step by step."]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dense", type=Path, default=Path("data/smollm2-135m-instruct"))
    parser.add_argument("--out", type=Path, default=Path("data/smollm2-135m-moe"))
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--noise", type=float, default=0.01, help="expert noise, in units of each matrix's std")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    start = time.perf_counter()
    dense = AutoModelForCausalLM.from_pretrained(args.dense, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.dense)
    generator = torch.Generator().manual_seed(args.seed)
    moe = upcycle(dense, args.experts, args.top_k, args.noise, generator=generator)
    moe.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    params = sum(p.numel() for p in moe.parameters())
    provenance = {
        "script": "data/make_smollm2_moe.py",
        "parameters": params,
        **{k: str(v) for k, v in vars(args).items()},
    }
    (args.out / "PROVENANCE.json").write_text(json.dumps(provenance, indent=2) + "\n")
    print(f"wrote {args.out}: {params / 1e6:.1f}M parameters in {time.perf_counter() - start:.0f} s")
    batch = tokenizer(PROMPTS, return_tensors="pt", padding=True)
    mask = batch.attention_mask.bool()
    with torch.no_grad():
        logits, moe_logits = dense(**batch).logits[mask], moe(**batch).logits[mask]  # [tokens, V]
    gap = (logits - moe_logits).abs().max().item()
    kl = torch.nn.functional.kl_div(
        moe_logits.log_softmax(-1), logits.log_softmax(-1), log_target=True, reduction="none"
    )
    same = (logits.argmax(-1) == moe_logits.argmax(-1)).sum().item()
    print(
        f"against the dense model on {len(mask.nonzero())} prompt tokens: max |logit difference| {gap:.3g} "
        f"(largest |logit| {logits.abs().max().item():.1f}), mean KL(dense || MoE) {kl.sum(-1).mean().item():.3g} "
        f"nats, same argmax on {same}"
    )


if __name__ == "__main__":
    main()
