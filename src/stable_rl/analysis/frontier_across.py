"""The stability frontier across waves: how each arm's collapse learning rate moves with the updates per
rollout N (the paper's off-policy protocol: mini-batch fixed, global batch N x mini-batch).

Each wave is one folder of frontier runs (``<variant>-s<seed>/version_0``) at one N; an arm names its variant
in each wave (``-`` where the wave lacks it). Writes ``across.png`` (collapse rate against N, one dot per seed,
the medians joined per arm) and ``across.md`` (the medians, seeds with an outcome in brackets):

    python3 -m stable_rl.analysis.frontier_across --out experiments/frontier/across \\
        --wave 1 experiments/frontier/onpolicy/logs --wave 8 experiments/frontier/n8/logs \\
        --arm "clip + R3" r3 r3+n8 --arm control exact exact+n8
"""

import argparse
import math
from pathlib import Path

from stable_rl.analysis.figures import save_figure
from stable_rl.analysis.frontier import Outcome, by_variant, collapsed_mostly, median_lr, outcome

ABSENT = "-"


def wave_outcomes(logs: Path, steps: int) -> dict[str, list[Outcome]]:
    """The outcomes of one wave's runs, by variant."""
    runs = sorted(logs.glob("*/version_0"))
    if not runs:
        raise FileNotFoundError(f"{logs}: no <variant>-s<seed>/version_0 run folders (a wave's logs/ folder?)")
    return by_variant([outcome(run, steps) for run in runs])


def arm_outcomes(
    waves: dict[int, dict[str, list[Outcome]]], arms: dict[str, list[str]]
) -> dict[str, dict[int, list[Outcome]]]:
    """Each arm's runs per N; an arm names one variant per wave, in the waves' order, or ``-``."""
    table: dict[str, dict[int, list[Outcome]]] = {}
    for arm, variants in arms.items():
        if len(variants) != len(waves):
            raise ValueError(f"arm {arm!r}: {len(variants)} variants for {len(waves)} waves (one each, '-' for none)")
        table[arm] = {}
        for (n, wave), variant in zip(waves.items(), variants, strict=True):
            if variant == ABSENT:
                continue
            if variant not in wave:
                raise ValueError(f"arm {arm!r}: no variant {variant!r} at N = {n} (there: {', '.join(sorted(wave))})")
            table[arm][n] = wave[variant]
    return table


def markdown(table: dict[str, dict[int, list[Outcome]]], ns: list[int]) -> str:
    """Median collapse rates per arm and N, with the seeds that had an outcome (cut-off runs have none)."""
    lines = ["| arm | " + " | ".join(f"N = {n}" for n in ns) + " |", "|---|" + "---|" * len(ns)]
    for arm, by_n in table.items():
        cells = []
        for n in ns:
            runs = by_n.get(n)
            judged = [o for o in runs or [] if not o.cut_off]
            cells.append("-" if not runs else f"{median_lr(runs):.3g} ({len(judged)})" if judged else "none (0)")
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(table: dict[str, dict[int, list[Outcome]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for i, (arm, by_n) in enumerate(table.items()):
        colour, shift = f"C{i}", 1 + (i - (len(table) - 1) / 2) * 0.035  # arms side by side at each N
        for n, runs in by_n.items():
            for o in runs:
                if o.sign:
                    ax.plot(n * shift, o.collapse_lr, "o", color=colour, alpha=0.5, markersize=4)
                elif o.cut_off:
                    ax.plot(n * shift, o.last_lr, "x", color=colour, markersize=6)
                else:
                    ax.plot(n * shift, o.last_lr, "^", mfc="none", color=colour, markersize=6)
        ns = sorted(by_n)
        medians = [median_lr(by_n[n]) if collapsed_mostly(by_n[n]) else math.nan for n in ns]
        ax.plot([n * shift for n in ns], medians, "-", color=colour, label=arm, linewidth=1.5)  # NaN: a gap
    ns = sorted({n for by_n in table.values() for n in by_n})
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_xlabel("updates per rollout N")
    ax.set_ylabel("learning rate at collapse")
    ax.set_title(
        "stability frontier across N\ndot: a seed's collapse, line: medians, open triangle: survived to, x: cut off at",
        fontsize=9,
    )
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for across.png and across.md")
    parser.add_argument(
        "--wave", nargs=2, action="append", required=True, metavar=("N", "LOGS"), help="a wave's N and logs"
    )
    parser.add_argument(
        "--arm", nargs="+", action="append", required=True, metavar="NAME VARIANT", help="an arm's variant per wave"
    )
    parser.add_argument("--steps", type=int, default=200, help="global steps a surviving run reaches")
    args = parser.parse_args(argv)
    if bad := [n for n, _ in args.wave if not n.isdigit() or int(n) < 1]:
        parser.error(f"--wave N LOGS: N is the updates per rollout, a whole number >= 1 (got {bad})")
    if bad := [arm[0] for arm in args.arm if len(arm) < 2]:
        parser.error(f"--arm NAME VARIANT...: {bad} name no variant")
    for option, names in (("--wave N", [int(n) for n, _ in args.wave]), ("--arm NAME", [a[0] for a in args.arm])):
        if repeated := sorted({str(name) for name in names if names.count(name) > 1}):
            parser.error(f"{option}: {', '.join(repeated)} given twice (the later one would replace the first)")
    try:
        waves = {int(n): wave_outcomes(Path(logs), args.steps) for n, logs in args.wave}
        table = arm_outcomes(waves, {arm[0]: arm[1:] for arm in args.arm})
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    args.out.mkdir(parents=True, exist_ok=True)
    plot(table, args.out / "across.png")
    body = markdown(table, list(waves))
    text = "# Stability frontier across N\n\n![across](across.png)\n\nMedian collapse learning rate (seeds with an "
    (args.out / "across.md").write_text(text + f"outcome):\n\n{body}\n")
    print(f"wrote across.png and across.md for {len(table)} arms at N = {', '.join(map(str, waves))} to {args.out}")


if __name__ == "__main__":
    main()
