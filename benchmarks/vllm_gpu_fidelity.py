"""How far vLLM's log mu_old is from the HF policy's log pi on the same GPU, by engine precision and by how
Triton multiplies float32 (TF32, Triton's default, or IEEE, what ``VLLMEngine`` sets for float32 engines):
the floor of the "no mismatch" control and the size of the real mismatches. Each row is a fresh process
(Triton reads ``TRITON_F32_DEFAULT`` when it compiles). Prints a table.

    PYTHONPATH=src python -m benchmarks.vllm_gpu_fidelity   # on a CUDA machine with vLLM
"""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "data" / "tiny-qwen3-moe"
ROWS = [  # (engine dtype, quantization, TRITON_F32_DEFAULT)
    ("float32", None, "tf32"),
    ("float32", None, "ieee"),
    ("bfloat16", None, "ieee"),
    ("bfloat16", "fp8_per_tensor", "ieee"),
]  # fp8_per_channel needs vLLM >= 0.33


def measure(dtype: str, quantization: str | None) -> dict:
    """One engine: 64 prompts x 8 samples of up to 64 tokens against the float32 HF policy."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from stable_rl.data import ReasoningGymPrompts
    from stable_rl.data.template import PromptTemplate
    from stable_rl.policy.logprobs import sequence_logprobs
    from stable_rl.rollout import RolloutBatch, VLLMEngine
    from stable_rl.routing import RouterHooks, routed_positions, routes_match

    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    problems = ReasoningGymPrompts(["basic_arithmetic", "chain_sum"], size=32, seed=100000).load()
    ids = [PromptTemplate().encode(tokenizer, p.question) for p in problems]
    engine = VLLMEngine(
        64, dtype=dtype, seed=0, quantization=quantization, return_routes=True, kv_cache_memory_bytes=1 << 30
    )
    engine.start(str(MODEL), max_model_len=512)
    samples = engine.generate(ids, group_size=8, step=0)
    engine.close()
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32).cuda().eval()
    batch = RolloutBatch.from_samples(samples, torch.zeros(len(samples)), 8, 0, 1.0, 0)
    ids_, attention, response = (t.cuda() for t in (batch.input_ids, batch.attention_mask, batch.response_mask))
    hooks = RouterHooks(model)
    with torch.no_grad(), hooks.record(ids_):
        logprobs, _ = sequence_logprobs(model, ids_, attention, response)
    gap = (logprobs.cpu() - batch.rollout_logprobs)[batch.response_mask].abs()
    needed = routed_positions(attention)
    agreement = routes_match(hooks.own, batch.routes.cuda())[needed].float().mean().item()
    return {"tokens": int(gap.numel()), "max": gap.max().item(), "mean": gap.mean().item(), "routes": agreement}


def main() -> None:
    if len(sys.argv) == 3:  # a child: one row
        print("RESULT", json.dumps(measure(sys.argv[1], None if sys.argv[2] == "-" else sys.argv[2])))
        return
    import torch
    import vllm

    print(f"vLLM {vllm.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}; tiny Qwen3-MoE")
    print(
        f"{'engine':<26} {'Triton fp32':<11} {'tokens':>7} {'max |dlogp|':>12} {'mean |dlogp|':>13} {'routes agree':>13}"
    )
    for dtype, quantization, triton in ROWS:
        env = {**os.environ, "TRITON_F32_DEFAULT": triton, "TRITON_CACHE_DIR": f"/tmp/triton-{triton}"}
        done = subprocess.run(
            [sys.executable, __file__, dtype, quantization or "-"], env=env, capture_output=True, text=True, timeout=400
        )
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if not lines:
            print(f"{dtype} {quantization}: failed\n{done.stderr[-2000:]}")
            continue
        r = json.loads(lines[0].removeprefix("RESULT "))
        name = dtype + (f" + {quantization}" if quantization else "")
        print(f"{name:<26} {triton:<11} {r['tokens']:>7} {r['max']:>12.2e} {r['mean']:>13.2e} {r['routes']:>13.4f}")


if __name__ == "__main__":
    main()
