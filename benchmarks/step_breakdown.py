"""Where a global step's time goes: weight sync, rollout, reward, pi_old recompute, update and the
framework's overhead, from the ``time/`` metrics every run logs. Runs a recipe for a few steps and
prints the mean seconds of each phase and its share of the step (the first step, which starts the
engine, and validation are left out).

    python -m benchmarks.step_breakdown [--config recipes/minirl.yaml recipes/quickstart.yaml ...] [--steps 10] [-- fit args]
"""

import argparse
import sys

import lightning as L

from benchmarks._fit import fit_with, split_extra

PHASES = ("sync", "rollout", "reward", "pi_old", "update", "overhead")


class StepTimes(L.Callback):
    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []

    def on_train_batch_end(self, trainer, *args) -> None:
        metrics = trainer.callback_metrics
        if "time/step" in metrics:
            self.steps.append({k.removeprefix("time/"): float(v) for k, v in metrics.items() if k.startswith("time/")})


def main() -> None:
    own, extra = split_extra(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", nargs="+", default=["recipes/minirl.yaml", "recipes/quickstart.yaml"])
    parser.add_argument("--steps", type=int, default=10, help="global steps measured (one more is run)")
    args = parser.parse_args(own)

    probe = StepTimes()
    fit_with(
        probe,
        [
            *(f"--config={c}" for c in args.config),
            f"--trainer.max_steps={args.steps + 1}",
            "--trainer.limit_val_batches=0",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_checkpointing=false",
            "--trainer.callbacks=[]",
            "--trainer.logger=false",
            *extra,
        ],
    )

    steps = probe.steps
    total = sum(s["step"] for s in steps) / len(steps)
    print(f"\n{' '.join(args.config)} {' '.join(extra)}: {len(steps)} global steps, {total:.3f} s per step")
    print("| phase | seconds per step | share |\n|---|---|---|")
    for phase in PHASES:
        mean = sum(s.get(phase, 0.0) for s in steps) / len(steps)
        print(f"| {phase} | {mean:.3f} | {mean / total:.1%} |")


if __name__ == "__main__":
    main()
