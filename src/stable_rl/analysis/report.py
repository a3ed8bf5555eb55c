"""Compare finished runs from their Lightning CSV logs: one figure per metric family, runs side by side,
and a markdown table of each metric's peak and final value per run, and each held-out reward's change from
the first validation to the last with its verdict (``stable_rl.analysis.heldout_change``), each run's first sign of
collapse (``stable_rl.analysis.collapse_signs``) and its pace (``stable_rl.analysis.pace``).

    stable-rl-report runs/minirl/version_0 runs/minirl_no_is/version_0 --out runs/report

With ``--frontier`` the runs are learning-rate-ramp runs and the report is their stability frontier
(``stable_rl.analysis.frontier``); ``--pair unstable:stable`` judges a pair of variants by the decision rule.
"""

import argparse
import math
from fnmatch import fnmatch
from pathlib import Path

from stable_rl.analysis.collapse_signs import EXPLAINED, signs_table
from stable_rl.analysis.figures import plot_family
from stable_rl.analysis.frontier import frontier_report
from stable_rl.analysis.heldout_change import HELDOUT, changes_table, heldout_changes, not_judged
from stable_rl.analysis.pace import pace_table
from stable_rl.analysis.reward_trend import reward_trend, trend_table
from stable_rl.analysis.run_logs import read_run, run_labels

RULE = (
    "A run learned (or got worse) where its held-out reward changed by at least the margin: two standard errors "
    "of the difference, bounded over problems (`stable_rl.analysis.heldout_change`); otherwise no change."
)
TREND = (
    "The least-squares slope of `train/reward` per global step and its standard error (`stable_rl.analysis.reward_trend`): "
    "where a run makes at most one pass over its prompts, each step's reward is a fresh estimate; a description, "
    "not a verdict."
)
PACE = "Seconds per global step (`stable_rl.analysis.pace`), on whatever shared the machine."
FAMILIES = {  # figure name -> metric patterns
    "reward": ["train/reward"],
    "heldout": [HELDOUT],  # shaded +- 2 bounded standard errors where the problem count is logged
    "kl": ["train/kl", "train/kl_k3", "train/kl_no_replay", "train/kl_k3_no_replay"],
    "entropy": ["train/entropy"],
    "health": ["train/health/*"],
    "routing": ["train/routing/infer_agreement", "train/routing/update_agreement"],
}


def family_metrics(runs: dict[str, dict], patterns: list[str]) -> list[str]:
    names = {name for series in runs.values() for name in series}
    return sorted(n for n in names if any(fnmatch(n, p) for p in patterns))


def table(runs: dict[str, dict], metrics: list[str]) -> str:
    """Markdown: one row per run and metric, with its peak and final value and their steps."""
    lines = ["| metric | run | peak | at step | final | at step |", "|---|---|---|---|---|---|"]
    for metric in metrics:
        for label, series in runs.items():
            if metric in series:
                finite = [p for p in series[metric] if not math.isnan(p[1])] or series[metric]
                peak_step, peak = max(finite, key=lambda point: point[1])
                final_step, final = series[metric][-1]
                lines.append(f"| {metric} | {label} | {peak:.4g} | {peak_step} | {final:.4g} | {final_step} |")
    return "\n".join(lines)


def report(run_dirs: list[Path], out: Path) -> dict[str, list[str]]:
    """Write ``<family>.png`` per family with data and ``report.md``; returns family -> metrics plotted."""
    runs = {label: read_run(d) for label, d in zip(run_labels(run_dirs), run_dirs, strict=True)}
    out.mkdir(parents=True, exist_ok=True)
    plotted = {}
    for family, patterns in FAMILIES.items():
        metrics = family_metrics(runs, patterns)
        if metrics:
            plot_family(runs, metrics, out / f"{family}.png")
            plotted[family] = metrics
    all_metrics = [m for metrics in plotted.values() for m in metrics]
    figures = "\n".join(f"![{family}]({family}.png)" for family in plotted)
    text = f"# Runs compared\n\n{figures}\n\n{table(runs, all_metrics)}\n"
    trends = [reward_trend(run, series["train/reward"]) for run, series in runs.items() if "train/reward" in series]
    if trends:
        text += f"\n## Training reward trend\n\n{TREND}\n\n{trend_table(trends)}\n"
    changes = heldout_changes(runs)
    unjudged = not_judged(runs, changes)
    if changes or unjudged:
        text += f"\n## Held-out reward, first validation to last\n\n{RULE}\n\n"
        text += f"{changes_table(changes)}\n" if changes else ""
        text += f"\nNo verdict (validated once, or no problem count): {', '.join(unjudged)}\n" if unjudged else ""
    signs = signs_table(runs)
    text += f"\n## Signs of collapse\n\n{EXPLAINED}\n\n{signs}\n" if signs else ""
    pace = pace_table(runs)
    text += f"\n## Pace\n\n{PACE}\n\n{pace}\n" if pace else ""
    (out / "report.md").write_text(text)
    return plotted


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="CSVLogger version directories")
    parser.add_argument("--out", type=Path, default=Path("report"), help="folder for the figures and report.md")
    parser.add_argument("--frontier", action="store_true", help="the runs ramp the learning rate: where each collapsed")
    parser.add_argument("--steps", type=int, default=200, help="--frontier: global steps a surviving run reaches")
    parser.add_argument(
        "--seeds", type=int, default=3, help="--frontier: runs of each variant the decision rule needs to judge a pair"
    )
    parser.add_argument(
        "--pair", nargs="*", default=[], metavar="UNSTABLE:STABLE", help="variants to judge by the decision rule"
    )
    args = parser.parse_args(argv)
    if args.frontier:
        pairs = [tuple(pair.split(":", 1)) for pair in args.pair]
        if bad := [pair for pair in pairs if len(pair) != 2]:
            parser.error(f"--pair takes UNSTABLE:STABLE variant names, got {bad}")
        outcomes = frontier_report(args.runs, args.out, pairs, args.steps, args.seeds)
        print(f"wrote frontier.png, aligned.png and frontier.md for {len(outcomes)} runs to {args.out}")
        return
    plotted = report(args.runs, args.out)
    print(f"wrote {', '.join(f'{f}.png' for f in plotted)} and report.md to {args.out}")


if __name__ == "__main__":
    main()
