"""Run recipes x seeds, one ``stable-rl fit`` each. Where there are GPUs, ``--per-gpu M`` runs share each visible GPU
(all at once unless ``--parallel K`` caps them); without GPUs in sequence, or ``--parallel K`` at a time, each on
its own CPU cores. Each run logs to ``<save_dir>/<name>-s<seed>``; the version directories are printed at the end
for ``stable-rl-report``.

    stable-rl-sweep --recipes "recipes/minirl.yaml" "recipes/minirl.yaml recipes/paper/minirl_no_is.yaml" \\
        --seeds 0 1 -- --trainer.max_steps=100
"""

import argparse
import os
import shlex
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Run:
    configs: tuple[str, ...]  # stacked YAML files, later ones override earlier ones
    seed: int
    save_dir: str
    extra: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The stems of the overlays (the configs after the first) joined by ``+``, or the only config's, and
        the seed: ``minirl_no_is-s1``, ``onpolicy_fp8-s0``, ``minirl_no_is+r3-s2``."""
        stems = [Path(c).stem for c in self.configs]
        return f"{'+'.join(stems[1:] or stems)}-s{self.seed}"

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "stable_rl.cli",
            "fit",
            *(f"--config={c}" for c in self.configs),
            f"--seed_everything={self.seed}",
            f"--trainer.logger.init_args.save_dir={self.save_dir}",
            f"--trainer.logger.init_args.name={self.name}",
            *self.extra,
        ]

    def log_dir(self) -> Path:
        """The newest version directory of this run's logger."""
        versions = sorted((Path(self.save_dir) / self.name).glob("version_*"), key=lambda p: int(p.name.split("_")[1]))
        if not versions:
            raise FileNotFoundError(f"run {self.name} wrote no log under {self.save_dir}/{self.name}")
        return versions[-1]


def plan(recipes: list[str], seeds: list[int], save_dir: str, extra: list[str]) -> list[Run]:
    """Every recipe stack (space-separated config files) with every seed, in that order."""
    runs = []
    for recipe in recipes:
        configs = tuple(shlex.split(recipe))
        missing = [c for c in configs if not Path(c).is_file()]
        if missing:
            raise FileNotFoundError(f"recipe file(s) {missing} not found (run from the project root)")
        runs += [Run(configs, seed, save_dir, tuple(extra)) for seed in seeds]
    check_unique_names(runs)
    return runs


def check_unique_names(runs: list[Run]) -> None:
    """Refuse two runs of one name: they would log into the same folder and the sweep would list one run twice
    (overlays of one file name in different folders, or a stack given twice)."""
    seen: dict[str, Run] = {}
    for run in runs:
        other = seen.setdefault(run.name, run)
        if other is not run:
            raise ValueError(
                f"two runs would be named {run.name} (logged into {run.save_dir}/{run.name}): "
                f"{' '.join(other.configs)!r} and {' '.join(run.configs)!r}. A run is named by its overlays' file "
                "names: give each stack once, rename one overlay, or sweep them separately with their own --save-dir"
            )


@dataclass(frozen=True)
class Slot:
    """Where one run goes: a GPU (shared by up to ``per_gpu`` runs) or a set of CPU cores."""

    env: dict[str, str]
    cpus: tuple[int, ...] = ()


def gpu_slots(gpus: int) -> list[Slot]:
    """One slot per GPU, numbered within the parent's ``CUDA_VISIBLE_DEVICES``."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    devices = (visible.split(",") if visible else [str(g) for g in range(gpus)])[:gpus]
    return [Slot({"CUDA_VISIBLE_DEVICES": d}) for d in devices]


def cpu_slots(parallel: int) -> list[Slot]:
    """This process's cores split into ``parallel`` disjoint sets (at most one per core). Unpinned,
    parallel runs on CPU oversubscribe the cores (vLLM binds its threads, torch spins its own):
    two quickstarts side by side on 2 cores took 7.0 s per step each, pinned 2.1 s, alone 1.5 s."""
    cores = sorted(os.sched_getaffinity(0))
    per = max(1, len(cores) // parallel)
    groups = [tuple(cores[i * per : (i + 1) * per]) for i in range(min(parallel, len(cores)))]
    return [
        Slot({"OMP_NUM_THREADS": str(len(g)), "VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, g))}, g) for g in groups
    ]


def execute(runs: list[Run], parallel: int | None = None, gpus: int = 0, per_gpu: int = 1) -> list[int]:
    """Run them, ``parallel`` at a time (unset: as many as the GPUs hold, ``per_gpu`` each; one without GPUs).
    With ``gpus``, each run goes to the GPU running the fewest runs (at most ``per_gpu``); without, parallel
    runs get disjoint CPU cores. Returns the exit codes."""
    parallel = parallel if parallel is not None else gpus * per_gpu if gpus else 1
    if per_gpu < 1 or parallel < 1:
        raise ValueError(f"--parallel {parallel} and --per-gpu {per_gpu} must be at least 1")
    slots = gpu_slots(gpus) if gpus else cpu_slots(parallel) if parallel > 1 else []
    capacity = per_gpu if gpus else 1
    parallel = min(parallel, len(slots) * capacity) if slots else parallel
    load = [0] * len(slots)
    lock = threading.Lock()

    def one(run: Run) -> int:
        index = None
        if slots:
            with lock:  # the pool never runs more than the slots hold, so the least loaded has room
                index = min(range(len(slots)), key=load.__getitem__)
                load[index] += 1
        slot = slots[index] if index is not None else Slot({})
        pin = (lambda: os.sched_setaffinity(0, slot.cpus)) if slot.cpus else None
        print(f"[sweep] {run.name}: {shlex.join(run.command()[1:])}", flush=True)
        try:
            return subprocess.run(run.command(), env={**os.environ, **slot.env}, preexec_fn=pin).returncode
        finally:
            if index is not None:
                with lock:
                    load[index] -= 1

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        return list(pool.map(one, runs))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", required=True, help='config stacks, e.g. "a.yaml b.yaml"')
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--save-dir", default="runs/sweep")
    parser.add_argument(
        "--parallel",
        type=int,
        help="runs at a time (default: --per-gpu on each visible GPU; without GPUs one, each parallel run on its own cores)",
    )
    parser.add_argument("--per-gpu", type=int, default=1, help="runs sharing one GPU (small models)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args(argv)
    runs = plan(args.recipes, args.seeds, args.save_dir, extra)
    if args.dry_run:
        for run in runs:
            print(shlex.join(run.command()[1:]))
        return
    import torch

    codes = execute(runs, args.parallel, torch.cuda.device_count(), args.per_gpu)
    failed = [run.name for run, code in zip(runs, codes, strict=True) if code]
    done = [str(run.log_dir()) for run, code in zip(runs, codes, strict=True) if not code]
    print("[sweep] finished runs (for stable-rl-report):", *done, sep="\n  ")
    if failed:
        raise SystemExit(f"[sweep] failed runs: {', '.join(failed)}")


if __name__ == "__main__":
    main()
