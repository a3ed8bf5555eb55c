"""Overlapped rollouts against the same run in sequence (issue 45: with k = 1 the step at most 1.1x max(rollout,
update) of the sequential path on the same work).

    PYTHONPATH=/tmp/site:src:benchmarks python3 -m benchmarks.gpu_overlap --out $OUT   # one CUDA GPU, vLLM; --help

``gpu_trl_comparison.py``'s workload (``recipes/minirl.yaml`` on the random 1.25B Qwen3-MoE, its "large" scale:
32 prompts x 8 responses of up to 1,024 tokens, bfloat16, CUDA graphs, sleep mode) with one rollout in flight,
``data.max_staleness: 1``, run in two ways that do the same work: ``overlap: false`` (sync, rollout, sleep and
rewards, then pi_old and the update, one after the other) and ``overlap: true`` (the next rollout generated in a
thread while the update runs). Each way runs ``--rounds`` times, in fresh processes, alternating which goes first;
each run's first ``--warmup`` steps are not timed. Per run: the median over its timed steps of the step
(``time/step``), of the rollout phase (sync + rollout + sleep + reward, in the thread when overlapped) and of the
update phase (pi_gen + pi_old + update). The table: medians and ranges over runs, and the overlapped step over
max(rollout phase, update phase) of the sequential runs (the target: at most 1.1) and over their step.
"""

import argparse
import json
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

ROLLOUT = ("sync", "rollout", "sleep", "reward")
UPDATE = ("pi_gen", "pi_old", "update")
MODES = ("sequential", "overlapped")


def phase(metrics: dict, name: str) -> float:
    """A phase's seconds in the main thread and in the rollout thread (overlapped, the thread joined this step)."""
    return metrics.get(f"time/{name}", 0.0) + metrics.get(f"time/background/{name}", 0.0)


def child(mode: str, args: argparse.Namespace) -> None:
    """One run: its timed steps' phases as JSON lines on stdout, after a ``STEP`` marker."""
    import lightning as L

    from benchmarks import gpu_trl_comparison as trl
    from benchmarks._fit import fit_with
    from benchmarks._trl_runs import fit_args

    w = json.loads(args.workload)

    class Probe(L.Callback):
        def on_train_batch_end(self, trainer, *rest) -> None:
            m = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("time/")}
            if trainer.global_step > args.warmup and "time/step" in m:
                record = {
                    "step": m["time/step"],
                    "rollout": sum(phase(m, p) for p in ROLLOUT),
                    "update": sum(phase(m, p) for p in UPDATE),
                    "wait": m.get("time/wait", 0.0),
                }
                print("STEP " + json.dumps(record), flush=True)

    overrides = [
        *trl.stable_rl_overrides(w, args.stable_rl),
        "--data.init_args.max_staleness=1",
        f"--data.init_args.overlap={'true' if mode == 'overlapped' else 'false'}",
    ]
    fit_with(Probe(), fit_args(w, args.warmup + args.steps, trl.RECIPE) + overrides)


def run(mode: str, workload: dict, args: argparse.Namespace, log: Path) -> list[dict]:
    command = [sys.executable, "-m", __spec__.name, "--child", mode, "--workload", json.dumps(workload)]
    command += ["--warmup", str(args.warmup), "--steps", str(args.steps), "--stable-rl", *args.stable_rl]
    with log.open("w") as out:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=out, text=True)
        out.write(done.stdout)
    out_lines = done.stdout.splitlines()
    if done.returncode:
        raise RuntimeError(f"the {mode} run failed (exit code {done.returncode}): see {log}")
    return [json.loads(line[5:]) for line in out_lines if line.startswith("STEP ")]


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def table(runs: dict[str, list[list[dict]]]) -> str:
    """Per way: medians over runs of each run's median step, rollout and update phases; then the ratios."""
    medians = {
        mode: {
            key: [statistics.median(s[key] for s in steps) for steps in runs[mode]]
            for key in ("step", "rollout", "update", "wait")
        }
        for mode in MODES
    }
    lines = ["| way | step s | rollout phase s | update phase s | waiting for the thread s |", "|---|---|---|---|---|"]
    for mode in MODES:
        m = medians[mode]
        lines.append(
            f"| {mode} | {spread(m['step'])} | {spread(m['rollout'])} | {spread(m['update'])} | {spread(m['wait'])} |"
        )
    seq, over = medians["sequential"], medians["overlapped"]
    bound = max(statistics.median(seq["rollout"]), statistics.median(seq["update"]))
    step = statistics.median(over["step"])
    lines.append(
        f"\nOverlapped step / max(rollout, update) of the sequential runs: {step / bound:.2f} (target <= 1.1); "
        f"overlapped / sequential step: {step / statistics.median(seq['step']):.2f}."
    )
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", default="large", help="gpu_trl_comparison.py's scale")
    p.add_argument("--rounds", type=int, default=3, help="runs of each way, alternating which goes first")
    p.add_argument("--steps", type=int, default=4, help="timed steps of each run")
    p.add_argument("--warmup", type=int, default=2, help="untimed first steps of each run")
    p.add_argument("--memory", type=float, default=0.3, help="vLLM's gpu_memory_utilization")
    p.add_argument("--model", default="", help="gpu_update.py's model arguments, e.g. '--layers 4'")
    p.add_argument("--out", default="runs/gpu_overlap", help="records and each run's log")
    p.add_argument("--stable-rl", nargs="*", default=[], metavar="KEY=VALUE", help="more stable-rl fit settings")
    p.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    p.add_argument("--workload", help=argparse.SUPPRESS)
    return p


def main() -> None:
    args = parser().parse_args()
    if args.child:
        child(args.child, args)
        return
    import shutil

    import gpu_update

    from benchmarks import gpu_trl_comparison as trl
    from benchmarks._random_moe import random_model_dir
    from benchmarks.trl_comparison import recipe_setting

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    recipe = recipe_setting(trl.RECIPE)
    max_tokens = trl.SCALES[args.scale]["max_tokens"]
    shape = gpu_update.parser().parse_args(shlex.split(args.model))
    model_dir = random_model_dir(shape, recipe["max_prompt_tokens"] + max_tokens)
    workload = trl.workload(recipe, args.scale, model_dir, args.memory, max_tokens)
    runs: dict[str, list[list[dict]]] = {mode: [] for mode in MODES}
    try:
        for round_ in range(args.rounds):
            for mode in MODES if round_ % 2 == 0 else MODES[::-1]:
                runs[mode].append(run(mode, workload, args, out / f"{mode}-{round_}.log"))
                with (out / "records.jsonl").open("a") as f:
                    f.write(json.dumps({"mode": mode, "round": round_, "steps": runs[mode][-1]}) + "\n")
                print(f"round {round_} {mode}: {json.dumps(runs[mode][-1])}", flush=True)
    finally:
        shutil.rmtree(model_dir)
    print(f"\n{args.scale} scale, k = 1, {args.rounds} runs of each way, {args.steps} timed steps each:\n")
    print(table(runs))


if __name__ == "__main__":
    main()
