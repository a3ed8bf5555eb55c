"""Where the host's time goes in one vLLM rollout as ``VLLMEngine`` runs it (in the training process:
``VLLM_ENABLE_V1_MULTIPROCESSING=0``, so scheduling, the model's step and output processing take turns): the
same requests generated under cProfile, each part's cumulative seconds per engine step and per sequence and
step, beside the wall time of an unprofiled run. Python's profiler slows Python code more than kernels: its
shares overstate the bookkeeping; the unprofiled wall time is the reference.

    python -m benchmarks.vllm_host_overhead                               # CPU: the tiny MoE, B = 64 and 256
    python -m benchmarks.vllm_host_overhead --model random --prompt 256 --response 512   # a GPU

``--model random``: the random 1.25B Qwen3-MoE of ``benchmarks/gpu_update.py``.
"""

import argparse
import cProfile
import os
import pstats
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import torch
from vllm_sampling_overhead import engine

# (label, file name ending, function): vLLM 0.26-0.32's engine step, part by part
PARTS = (
    ("scheduler: schedule", "core/sched/scheduler.py", "schedule"),
    ("scheduler: update from output", "core/sched/scheduler.py", "update_from_output"),
    ("model runner: forward", "worker/gpu_model_runner.py", "execute_model"),
    ("model runner: sample", "worker/gpu_model_runner.py", "sample_tokens"),
    ("output processor (log-probs, stops)", "engine/output_processor.py", "process_outputs"),
)


def requests(args, batch: int):
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    g = torch.Generator().manual_seed(batch)
    prompts = [
        TokensPrompt(prompt_token_ids=torch.randint(10, 1000, (args.prompt,), generator=g).tolist())
        for _ in range(batch)
    ]
    params = [  # as VLLMEngine asks: a seed per request, log mu of the sampled token, token ids only
        SamplingParams(
            temperature=1.0,
            max_tokens=args.response,
            min_tokens=args.response,
            logprobs=0,
            seed=i,
            detokenize=False,
        )
        for i in range(batch)
    ]
    return prompts, params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="data/tiny-qwen3-moe", help="a model directory, or random")
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--prompt", type=int, default=40)
    parser.add_argument("--response", type=int, default=64)
    args = parser.parse_args()
    args.batch = max(args.batches)
    if args.model == "random":
        import gpu_update

        shape = gpu_update.parser().parse_args([])
        model, args.model = gpu_update.random_model(shape, gpu_update.model_config(shape))
        del model
    llm = engine(args)
    llm.generate(*requests(args, 8), use_tqdm=False)  # warm-up
    rows = []
    for batch in args.batches:
        prompts, params = requests(args, batch)
        start = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        wall = time.perf_counter() - start
        profile = cProfile.Profile()
        profile.enable()
        start = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        profiled = time.perf_counter() - start
        profile.disable()
        stats = pstats.Stats(profile).stats  # (file, line, function) -> (calls, primitive calls, tottime, cumtime, ...)
        steps = sum(v[0] for (f, _, name), v in stats.items() if f.endswith(PARTS[0][1]) and name == "schedule")
        parts = [
            sum(v[3] for (f, _, name), v in stats.items() if f.endswith(suffix) and name == function)
            for _, suffix, function in PARTS
        ]
        rows.append((batch, steps, wall, profiled, parts))

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU, {torch.get_num_threads()} threads"
    import vllm

    print(
        f"\n{device}, vLLM {vllm.__version__}, {args.model}: requests of {args.prompt} prompt + {args.response} "
        "response tokens, seeded, log-probs, no detokenizing\n"
    )
    for batch, steps, wall, profiled, parts in rows:
        print(
            f"B = {batch}: {steps} engine steps; unprofiled {wall:.2f} s ({1e3 * wall / steps:.2f} ms per step, "
            f"{1e6 * wall / steps / batch:.1f} us per sequence and step); profiled {profiled:.2f} s\n"
        )
        print("| part | ms per step (profiled) | us per sequence and step | share of the profiled run |")
        print("|---|---|---|---|")
        for (label, _, _), seconds in zip(PARTS, parts, strict=True):
            print(
                f"| {label} | {1e3 * seconds / steps:.2f} | {1e6 * seconds / steps / batch:.1f} | "
                f"{seconds / profiled:.0%} |"
            )
        print()


if __name__ == "__main__":
    main()
