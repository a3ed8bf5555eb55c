"""What one weight sync into a colocated vLLM engine costs, part by part, for each way of loading the weights
``VLLMEngine`` offers: vLLM's ``reload_weights`` (layer by layer: each layer rebuilt, loaded, processed as at
start, FP8 re-quantized, and copied into the tensors the engine runs on) and the model's own ``load_weights``
writing into those tensors in place (what vLLM's RLHF examples and TRL do). Interleaved rounds; medians with
their range; after each sync the engine's log-probs of the same greedy samples are compared with the first
way's, so a faster way that loads something else shows.

    python -m benchmarks.vllm_sync_overhead                                   # CPU: the tiny MoE
    python -m benchmarks.vllm_sync_overhead --model random                    # a GPU: gpu_update.py's 1.25B MoE
    python -m benchmarks.vllm_sync_overhead --model random --shape "--hidden 256 --expert-width 128"  # CPU

Parts of a sync (the engine asleep first where it sleeps: sleep mode, GPUs): streaming the policy's weights
in the checkpoint's layout (``CheckpointLayout``, without the engine), the engine's ``sync`` (wake, load,
prefix cache reset), and the sleep after the rollout. ``--profile`` prints the functions of the sync that take
the most time under cProfile, per way.
"""

import argparse
import cProfile
import os
import pstats
import shlex
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import torch
from transformers import AutoModelForCausalLM

from stable_rl.rollout import Sampling, VLLMEngine

WAYS = ("reload", "in place")  # VLLMEngine(reload_weights=True / False)


def synced_seconds(engine: VLLMEngine, policy, version: int) -> dict[str, float]:
    """Seconds of each part of one sync (and the sleep before it, where the engine sleeps)."""
    cuda = torch.cuda.is_available()
    parts = {}
    start = time.perf_counter()
    engine.sleep()
    cuda and torch.cuda.synchronize()
    parts["sleep"] = time.perf_counter() - start
    start = time.perf_counter()
    for _ in engine.layout(policy.state_dict().items()):
        pass
    parts["stream in checkpoint layout"] = time.perf_counter() - start
    start = time.perf_counter()
    engine.sync(policy.state_dict().items(), version)
    cuda and torch.cuda.synchronize()
    parts["sync"] = time.perf_counter() - start
    return parts


def greedy_logprobs(engine: VLLMEngine, prompts: list[list[int]]) -> torch.Tensor:
    samples = engine.generate(prompts, 1, step=0, sampling=Sampling(max_new_tokens=16, temperature=0.0))
    return torch.tensor([lp for s in samples for lp in s.logprobs])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="data/tiny-qwen3-moe", help="a model directory, or random")
    parser.add_argument("--shape", default="", help="gpu_update.py's model arguments for --model random")
    parser.add_argument("--dtype", default=None, help="default: bfloat16 on a GPU, float32 on CPU")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = args.dtype or ("bfloat16" if device == "cuda" else "float32")
    if args.model == "random":
        import gpu_update

        shape = gpu_update.parser().parse_args(shlex.split(args.shape))
        model, args.model = gpu_update.random_model(shape, gpu_update.model_config(shape))
        del model
    policy = AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, dtype)).to(device)
    engine = VLLMEngine(dtype=dtype, seed=0, max_num_seqs=8)
    engine.start(args.model, max_model_len=128)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(10, 1000, (24,), generator=g).tolist() for _ in range(4)]
    with torch.no_grad():  # weights the engine does not hold yet
        for p in policy.parameters():
            p.mul_(1.01)
    ways = WAYS if engine.in_place else WAYS[:1]  # on CPU, or with FP8, the engine only reloads
    seconds: dict[str, dict[str, list[float]]] = {way: {} for way in ways}
    reference, differences = None, {way: 0.0 for way in ways}
    version = 0
    for _ in range(args.repeats):
        for way in ways:
            engine.reload_weights = way == "reload"
            version += 1
            for part, value in synced_seconds(engine, policy, version).items():
                seconds[way].setdefault(part, []).append(value)
            logprobs = greedy_logprobs(engine, prompts)
            reference = logprobs if reference is None else reference
            differences[way] = max(differences[way], (logprobs - reference).abs().max().item())
    name = torch.cuda.get_device_name() if device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    import vllm

    tensors = sum(1 for _ in engine.layout(policy.state_dict().items()))
    print(
        f"\n{name}, vLLM {vllm.__version__}, {args.model} ({dtype}, {sum(p.numel() for p in policy.parameters()):,} "
        f"parameters, {tensors} tensors in the checkpoint's layout), sleep mode {engine._sleeps(engine.platform)}; "
        f"{args.repeats} interleaved rounds, median (min-max) seconds\n"
    )
    parts = list(seconds[ways[0]])
    print(f"| way | {' | '.join(parts)} | max abs d log-prob vs the first sync |")
    print("|---" * (len(parts) + 2) + "|")
    for way in ways:
        cells = [f"{statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})" for v in (seconds[way][p] for p in parts)]
        print(f"| {way} | {' | '.join(cells)} | {differences[way]:.2e} |")
    if args.profile:
        for way in ways:
            engine.reload_weights = way == "reload"
            engine.sleep()
            profile = cProfile.Profile()
            version += 1
            profile.runcall(engine.sync, policy.state_dict().items(), version)
            print(f"\n{way}: the sync under cProfile, top 15 by cumulative time")
            pstats.Stats(profile).sort_stats("cumulative").print_stats(15)
    engine.close()


if __name__ == "__main__":
    main()
