"""The atlas's runs in PROTOCOL.md Part 2's order (Part 3's cells last), which the committed logs hold, the next wave.

    python experiments/atlas/plan.py --seeds 10                         # the cells, and how many runs each has left
    python experiments/atlas/plan.py --seeds 10 --next 12               # the next wave's runs (their commands)
    python experiments/atlas/plan.py --seeds 10 --next 18 --run --save-dir runs/atlas/w01 -- \\
        --trainer.max_time=00:00:19:00                                  # run them, the wave in a folder of its own

Stage 3 and later need L* and L_M (``--l-star``, ``--l-m``), which the core matrix decides (Part 2). A run is done
where a committed archive (``logs/atlas/*.tar.xz``) holds it at its horizon, or holds it twice (cut by its wave's
time limit, run again once, cut again: censored).
"""

import argparse
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from stable_rl.analysis.run_logs import archived_copies

HERE = Path(__file__).parent
RECIPES = HERE / "recipes"
LEVELS = {
    "L0": "l0_exact",
    "L1": "l1_bf16",
    "L2": "l2_fp8",
    "L3": "l3_fp8_kv",
    "L4": "l4_noise0.1",
    "L5": "l5_noise0.15",
    "L6": "l6_noise0.2",
    "L7": "l7_noise0.3",
}
PAPER, CORRECTIONS = "recipes/paper", "recipes/corrections"
VERDICT_ARMS = [f"{PAPER}/minirl_length_norm", f"{PAPER}/grpo", f"{PAPER}/cispo"]
DPPO = [f"{CORRECTIONS}/dppo_tv", f"{CORRECTIONS}/dppo_kl"]
REPORTED_ARMS = [
    f"{CORRECTIONS}/{name}"
    for name in ("masked_is", "sequence_is", "sequence_mis", "geometric_mask", "icepop", "gspo", "gspo_token")
]
OFF_POLICY = [f"{PAPER}/noclip", None, f"{PAPER}/r2", f"{PAPER}/r3"]  # no clip, clip, clip + R2, clip + R3
FIRST_SEED, REPORTED_SEEDS = 100, 6


@dataclass(frozen=True)
class Cell:
    level: str
    overlays: tuple[str, ...]  # after atlas.yaml, the level and the rate, in order (paths from the project root)
    seeds: int
    horizon: int = 900

    def configs(self) -> tuple[str, ...]:
        root = RECIPES.relative_to(HERE.parents[1])
        return (
            str(root / "atlas.yaml"),
            str(root / "dial" / f"{LEVELS[self.level]}.yaml"),
            str(root / "lr" / "lr3e-4.yaml"),
            *self.overlays,
        )

    @property
    def updates_per_row(self) -> int:
        """N: the optimizer updates of one logged row (a rollout; ``offpolicy/n<N>.yaml``, else 1, on-policy)."""
        return next((int(Path(o).stem[1:]) for o in self.overlays if Path(o).parent.name == "offpolicy"), 1)

    def run_name(self, seed: int) -> str:
        """The name ``stable_rl.cli.sweep`` gives the run: its overlays' stems after atlas.yaml, and the seed."""
        return f"{'+'.join(Path(c).stem for c in self.configs()[1:])}-s{seed}"


def cells(seeds: int, l_star: str | None = None, l_m: str | None = None) -> list[Cell]:
    """Part 2's cells in run order, then Part 3's; stage 3 on needs ``l_star`` (and ``l_m`` where MiniRL's core cell
    collapses)."""
    out = [Cell("L0", (), seeds)]
    for level in ("L7", "L6", "L5", "L4", "L3", "L2", "L1"):
        out += [Cell(level, (), seeds), Cell(level, (f"{PAPER}/minirl_no_is.yaml",), seeds)]
    if l_star is None:
        return out
    levels = ["L2", l_star]
    for level in levels:
        out += [Cell(level, (f"{arm}.yaml",), seeds) for arm in VERDICT_ARMS + DPPO]
    if l_m is not None and l_m not in levels:
        out += [Cell(l_m, (f"{arm}.yaml",), seeds) for arm in DPPO]
    for level in levels:
        out += [Cell(level, (f"{arm}.yaml",), REPORTED_SEEDS) for arm in REPORTED_ARMS]
    for level in levels:
        for n, horizon in ((4, 900), (16, 896)):
            for mode in OFF_POLICY:
                stack = (str(RECIPES.relative_to(HERE.parents[1]) / "offpolicy" / f"n{n}.yaml"),)
                out.append(Cell(level, stack + ((f"{mode}.yaml",) if mode else ()), seeds, horizon))
    out += [Cell("L2", (f"{PAPER}/cold_start_{x}.yaml",), seeds) for x in "ab"]
    staleness = RECIPES.relative_to(HERE.parents[1]) / "staleness"  # Part 3: rollouts in flight, k = 1 and 2
    for k in (1, 2):
        out += [
            Cell("L2", (str(staleness / f"k{k}.yaml"), *method), seeds)
            for method in ((), (f"{PAPER}/minirl_no_is.yaml",))
        ]
    return out


def pending(plan: list[Cell], logged: dict[str, list[int]]) -> list[tuple[Cell, int]]:
    """(cell, seed) of every run not done: ``logged`` maps a run name to the last step of each archived copy (a
    logged row of N updates, off-policy: its last update N (step + 1) - 1, PROTOCOL.md Part 2)."""
    runs = []
    for cell in plan:
        n = cell.updates_per_row
        for seed in range(FIRST_SEED, FIRST_SEED + cell.seeds):
            copies = logged.get(cell.run_name(seed), [])
            if not any(n * (last + 1) - 1 >= cell.horizon - 1 for last in copies) and len(copies) < 2:
                runs.append((cell, seed))
    return runs


def logged_runs(archives: list[Path]) -> dict[str, list[int]]:
    """Each archived run's last training step, per copy, from ``logs/atlas/*.tar.xz`` (no copy archived twice)."""
    logged: dict[str, list[int]] = {}
    for _, name, rows in archived_copies(archives):
        steps = [int(row["step"]) for row in rows if row.get("train/reward")]
        logged.setdefault(name, []).append(max(steps, default=-1))
    return logged


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, required=True, help="seeds per cell with a verdict (pilot/power.md)")
    parser.add_argument("--l-star", choices=list(LEVELS), help="L*: the lowest level whose core cell collapses")
    parser.add_argument("--l-m", choices=list(LEVELS), help="L_M: the lowest level where MiniRL's core cell collapses")
    parser.add_argument("--next", type=int, help="the next this many runs")
    parser.add_argument("--run", action="store_true", help="run them, sharing the GPU (with --next)")
    parser.add_argument("--save-dir", help="where the wave logs: a folder of its own, runs/atlas/<wave> (Part 2c)")
    args = parser.parse_args(argv)
    plan = cells(args.seeds, args.l_star, args.l_m)
    todo = pending(plan, logged_runs(sorted((HERE / "logs" / "atlas").glob("*.tar.xz"))))
    if args.next is None:
        for cell in plan:
            left = sum(1 for c, _ in todo if c == cell)
            print(f"{cell.run_name(FIRST_SEED).removesuffix(f'-s{FIRST_SEED}')}: {left} of {cell.seeds} runs left")
        if args.l_star is None:
            print("(stage 3 on: give --l-star, and --l-m, once the core matrix has run)")
        return
    from stable_rl.cli.sweep import Run, execute

    if args.run and (args.save_dir is None or (Path(args.save_dir).exists() and any(Path(args.save_dir).iterdir()))):
        parser.error(
            f"--run needs --save-dir, a new folder for this wave (runs/atlas/<wave>; {args.save_dir} holds runs "
            "already): each archive packs one wave's own folder, so no run is archived twice (PROTOCOL Part 2c)"
        )
    save_dir = args.save_dir or "runs/atlas/<wave>"
    wave = [Run(cell.configs(), seed, save_dir, tuple(extra)) for cell, seed in todo[: args.next]]
    for run in wave:
        print(shlex.join(run.command()[1:]))
    if args.run and wave:
        import torch

        codes = execute(wave, None, torch.cuda.device_count(), per_gpu=len(wave))
        if any(codes):
            raise SystemExit(f"failed runs: {[run.name for run, code in zip(wave, codes, strict=True) if code]}")


if __name__ == "__main__":
    main()
