"""Where a global step's time goes: weight sync, rollout, reward, pi_old recompute, update and the
framework's overhead, from the ``time/`` metrics every run logs. Runs a recipe for a few steps and
prints the mean seconds of each phase and its share of the step (the first step, which starts the
engine, and validation are left out).

    python benchmarks/step_breakdown.py [--config recipes/quickstart.yaml ...] [--steps 10] [-- fit args]
"""

import argparse
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import lightning as L

PHASES = ("sync", "rollout", "reward", "pi_old", "update", "overhead")


class StepTimes(L.Callback):
    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []

    def on_train_batch_end(self, trainer, *args) -> None:
        metrics = trainer.callback_metrics
        if "time/step" in metrics:
            self.steps.append({k.removeprefix("time/"): float(v) for k, v in metrics.items() if k.startswith("time/")})


def main() -> None:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", nargs="+", default=["recipes/quickstart.yaml"])
    parser.add_argument("--steps", type=int, default=10, help="global steps measured (one more is run)")
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)

    from stable_rl.cli import main as cli

    fit = cli(
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
        run=False,
    )
    probe = StepTimes()
    fit.trainer.callbacks.append(probe)
    fit.trainer.fit(fit.model, datamodule=fit.datamodule)

    steps = probe.steps
    total = sum(s["step"] for s in steps) / len(steps)
    print(f"\n{' '.join(args.config)} {' '.join(extra)}: {len(steps)} global steps, {total:.3f} s per step")
    print("| phase | seconds per step | share |\n|---|---|---|")
    for phase in PHASES:
        mean = sum(s.get(phase, 0.0) for s in steps) / len(steps)
        print(f"| {phase} | {mean:.3f} | {mean / total:.1%} |")


if __name__ == "__main__":
    main()
