"""The atlas's tables, remade from the committed logs (experiments/atlas/logs/*/*.tar.xz, each run's metrics.csv and
heldout_outcomes.csv as experiments/atlas/pack_logs.sh packed them).

    python experiments/atlas/analysis.py   # experiments/atlas/pilot/: dial.md, rate.md, control.png, power.md

and, where logs/atlas/*.tar.xz exist, the atlas's verdicts in experiments/atlas/atlas/ (verdicts.py).
"""

import math
import statistics
import sys
from pathlib import Path

from stable_rl.analysis.heldout_change import HeldoutChange
from stable_rl.analysis.run_logs import read_archive as read_runs
from stable_rl.analysis.run_logs import series_of
from stable_rl.analysis.survival import (
    Survival,
    collapse_time,
    logrank_power,
    trailing_means,
    weibull_fit_groups,
    weibull_shape_lower_bound,
)

HERE = Path(__file__).parent
LEVELS = {  # run-name prefix -> (level, setting), PROTOCOL.md Part 1
    "l0_exact": ("L0", "vLLM float32, IEEE kernels (exact control)"),
    "l1_bf16": ("L1", "vLLM bfloat16"),
    "l2_fp8": ("L2", "vLLM FP8 weights"),
    "l3_fp8_kv": ("L3", "FP8 weights + FP8 KV cache"),
    "l4_noise0.1": ("L4", "float32, weight noise 0.1"),
    "l5_noise0.15": ("L5", "float32, weight noise 0.15"),
    "l6_noise0.2": ("L6", "float32, weight noise 0.2"),
    "l7_noise0.3": ("L7", "float32, weight noise 0.3"),
}
READINGS = {  # column -> metric, each the median over a run's training steps (Part 1a)
    "KL k3 per token": "train/kl_k3",
    "per-response gap, median (nats)": "train/health/seq_train_infer_abs_p50",
    "per-response gap, p90 (nats)": "train/health/seq_train_infer_abs_p90",
    "tokens beyond the IS cap": "train/health/train_infer_beyond_cap",
}


def step_median(rows: list[dict[str, str]], metric: str) -> float:
    """The median over the run's training steps of ``metric``."""
    return statistics.median(float(row[metric]) for row in rows if row.get(metric))


def first_heldout(rows: list[dict[str, str]]) -> float:
    """The held-out avg@4 before training (step 0): the engine's own samples at the run's level."""
    return next(float(row["val/heldout/avg@4"]) for row in rows if row.get("val/heldout/avg@4"))


def dial_table(runs: dict[str, list[dict[str, str]]]) -> str:
    """Part 1a's dial table: per level, the mean over its runs of each reading's median over steps, the step-0
    held-out avg@4, and whether the level samples below half of L0's (a worse sampler)."""
    by_level = {prefix: [rows for name, rows in runs.items() if name.split("+")[0] == prefix] for prefix in LEVELS}
    heldout = {p: statistics.fmean(first_heldout(rows) for rows in level) for p, level in by_level.items() if level}
    problems = {
        int(float(r["val/heldout/problems"]))
        for level in by_level.values()
        for rows in level
        for r in rows
        if r.get("val/heldout/problems")
    }
    lines = [
        "| level | engine | runs | " + " | ".join(READINGS) + " | held-out avg@4 at step 0 | sampler |",
        "|---|---|---|" + "---|" * len(READINGS) + "---|---|",
    ]
    for prefix, (level, setting) in LEVELS.items():
        rows_of_runs = by_level[prefix]
        if not rows_of_runs:
            continue
        readings = [
            statistics.fmean(step_median(rows, metric) for rows in rows_of_runs) for metric in READINGS.values()
        ]
        worse = "worse: below half of L0's" if heldout[prefix] < heldout["l0_exact"] / 2 else "at least half of L0's"
        cells = [f"{value:.2g}" for value in readings]
        lines.append(
            f"| {level} | {setting} | {len(rows_of_runs)} | "
            + " | ".join(cells)
            + f" | {heldout[prefix]:.3f} | {worse} |"
        )
    steps = {sum(1 for r in rows if r.get("train/kl_k3")) for rows in runs.values()}
    note = (
        f"\nEach reading: the median over a run's {'/'.join(map(str, sorted(steps)))} training steps, averaged over the "
        f"level's runs (seeds 0 and 1, learning rate 1e-4); held-out: {'/'.join(map(str, sorted(problems)))} problems, "
        "4 samples each, before training, mean of the seeds. L0's KL below 0 is float rounding of r - 1 - log r at r = 1.\n"
    )
    return "\n".join(lines) + "\n" + note


def heldout_after(series: dict[str, list[tuple[int, float]]], updates: int) -> tuple[int, float, int]:
    """(step, held-out avg@4, problems) of the validation after ``updates`` optimizer updates (logged at step
    ``updates`` - 1; the one before training at step 0)."""
    step = max(updates - 1, 0)
    value = dict(series["val/heldout/avg@4"])[step]
    return step, value, int(dict(series["val/heldout/problems"])[step])


def horizon_of(runs: dict[str, dict[str, list[tuple[int, float]]]], planned: int = 1000) -> int:
    """Part 1a: ``planned`` updates, or, where a run of the wave stopped short, the largest multiple of 100 that every
    run reached (a run reaching n updates logs its last training step n - 1)."""
    reached = min(max(step for step, _ in series["train/reward"]) + 1 for series in runs.values())
    return planned if reached >= planned else reached // 100 * 100


def seed_verdict(name: str, series: dict[str, list[tuple[int, float]]], horizon: int) -> dict[str, object]:
    """Part 1's rule for one control run: (a) held-out avg@4 after min(300, 3H/10) updates above step 0's by at
    least the bounded two-standard-error margin, (b) no collapse before the horizon, (c) at most 5% of updates
    clipped."""
    early = min(300, 3 * horizon // 10 // 100 * 100)  # the validation at or before 3H/10 (every 100 updates)
    (s0, first, _), (s1, mid, problems), (_, last, _) = (heldout_after(series, n) for n in (0, early, horizon))
    change = HeldoutChange(name, "val/heldout/avg@4", s0, first, s1, mid, problems)
    survival = collapse_time(series, horizon=horizon - 1)
    clipped = statistics.fmean(v for step, v in series["train/grad_clipped"] if step < horizon)
    learned, holds, rare_clip = change.verdict == "learned", not survival.collapsed, clipped <= 0.05
    return {
        "first": first,
        "mid": mid,
        "last": last,
        "margin": change.margin,
        "learned": learned,
        "collapse": survival.time if survival.collapsed else None,
        "clipped": clipped,
        "passes": learned and holds and rare_clip,
    }


def rate_table(runs: dict[str, list[dict[str, str]]]) -> str:
    """Part 1's learning-rate table: per candidate rate and seed, the rule's three parts; a rate passes on >= 5 of
    6 seeds, and the largest passing rate is the atlas's."""
    series = {name: series_of(rows, name) for name, rows in runs.items()}
    horizon = horizon_of(series)
    early = min(300, 3 * horizon // 10 // 100 * 100)  # the validation at or before 3H/10 (every 100 updates)
    lines = [
        f"Horizon H = {horizon} updates; the rule reads held-out after {early} updates.\n",
        f"| rate | seed | held-out at 0 | at {early} | at {horizon} | margin | learned | collapse | clipped | passes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    passing = {}
    rates = sorted({name.split("+")[1].split("-s")[0] for name in series}, key=lambda r: float(r[2:]), reverse=True)
    for rate in rates:
        verdicts = [(name, seed_verdict(name, s, horizon)) for name, s in sorted(series.items()) if f"+{rate}-" in name]
        for name, v in verdicts:
            lines.append(
                f"| {rate[2:]} | {name.rsplit('-s', 1)[1]} | {v['first']:.3f} | {v['mid']:.3f} | {v['last']:.3f} | "
                f"{v['margin']:.3f} | {'yes' if v['learned'] else 'no'} | {v['collapse'] or 'none'} | "
                f"{v['clipped']:.1%} | {'yes' if v['passes'] else 'no'} |"
            )
        passing[rate] = sum(v["passes"] for _, v in verdicts)
        lines.append(f"| {rate[2:]} | all | | | | | | | | {passing[rate]} of {len(verdicts)} |")
    chosen = next((rate[2:] for rate in rates if passing[rate] >= 5), None)
    lines.append(f"\nThe rate: {chosen if chosen else 'none of these (Part 1: try 3e-5, then 1e-5)'}.\n")
    return "\n".join(lines)


POWER_SEEDS = (6, 8, 10, 12)  # Part 2: the smallest with power >= 0.8 against a 2x ratio; 12 at most
RATIOS = (1.25, 1.5, 2, 3, 4, 6, 8)  # Part 2: the ratios of median times to collapse that n seeds might detect
MEDIANS = (150, 300, 450)  # Part 2: the earlier arm's median time to collapse; the power is the least over them


def cells_of(runs: dict[str, list[dict[str, str]]], horizon: int) -> dict[str, list[Survival]]:
    """Each cell's (run name less its ``-s<seed>``) times to collapse by Part 1's rule, censored at ``horizon``."""
    cells: dict[str, list[Survival]] = {}
    for name, rows in sorted(runs.items()):
        cells.setdefault(name.rsplit("-s", 1)[0], []).append(collapse_time(series_of(rows, name), horizon=horizon - 1))
    return cells


def least_power(shape: float, ratio: float, seeds: int, horizon: int, simulations: int, alpha: float = 0.05) -> float:
    """Part 2's power: the least over MEDIANS of the log-rank permutation test's power at level ``alpha`` against
    ``ratio``, times floored at the 100-update warm-up and censored at the last update, H - 1."""
    return min(
        logrank_power(
            shape,
            median / math.log(2) ** (1 / shape),
            ratio,
            seeds,
            horizon - 1,
            simulations=simulations,
            alpha=alpha,
            max_splits=10_000,
            floor=100,
        )
        for median in MEDIANS
    )


def power_table(runs: dict[str, list[dict[str, str]]], horizon: int = 900, simulations: int = 2000) -> str:
    """Part 2's seeds rule from the power wave: the shared Weibull shape's lower 80% profile-likelihood bound
    where the wave has at least 5 collapses (otherwise k = 2, and k = 1 reported beside it), the least power over
    MEDIANS against a 2x ratio at each candidate n until one reaches 0.8, and the ratio that n detects."""
    cells = cells_of(runs, horizon)
    collapses = sum(s.collapsed for runs_ in cells.values() for s in runs_)
    lines = ["| cell | seeds | collapsed | times to collapse (censored: >) |", "|---|---|---|---|"]
    for cell, survivals in cells.items():
        times = ", ".join(f"{s.time:g}" if s.collapsed else f">{s.time:g}" for s in survivals)
        lines.append(f"| {cell} | {len(survivals)} | {sum(s.collapsed for s in survivals)} | {times} |")
    if collapses >= 5:
        fitted = weibull_fit_groups(list(cells.values()))[0]
        shape = weibull_shape_lower_bound(list(cells.values()))
        shapes = {f"k = {shape:.3g} (lower 80% bound; fitted {fitted:.3g})": shape}
    else:
        shapes = {"k = 2 (assumed: fewer than 5 collapses)": 2.0, "k = 1 (reported beside it)": 1.0}
    lines += [
        "",
        f"{collapses} collapses in {sum(map(len, cells.values()))} runs. Power: the least over earlier-arm medians "
        f"{', '.join(map(str, MEDIANS))} updates, level 0.05, {simulations} simulations each.",
        "",
        "| shape | seeds | power against 2x | smallest ratio detected with power >= 0.8 |",
        "|---|---|---|---|",
    ]
    chosen = []
    for label, shape in shapes.items():
        curve = {}
        for n in POWER_SEEDS:
            curve[n] = least_power(shape, 2.0, n, horizon, simulations)
            if curve[n] >= 0.8:
                break
        n = next((n for n, p in curve.items() if p >= 0.8), POWER_SEEDS[-1])
        detected = next((r for r in RATIOS if least_power(shape, r, n, horizon, simulations) >= 0.8), None)
        for m, p in curve.items():
            found = (f"{detected:g}x" if detected else "beyond 8x") if m == n else ""
            lines.append(f"| {label} | {m} | {p:.3f} | {found} |")
        chosen.append(n)
    n, shape = chosen[0], next(iter(shapes.values()))
    halved = least_power(shape, 2.0, n, horizon, simulations, alpha=0.025)
    lines.append(f"\nSeeds per cell with a verdict: {n} (Part 2's rule; at most {POWER_SEEDS[-1]}).")
    lines.append(f"At Holm's halved level (0.025, the families of two) {n} seeds have power {halved:.3f} against 2x.\n")
    return "\n".join(lines)


def control_figure(runs: dict[str, list[dict[str, str]]], path: Path) -> None:
    """The control's runs of each candidate rate, one line per seed: held-out avg@4 after n updates, and the
    20-step means of training reward and entropy that the collapse endpoint reads."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from stable_rl.analysis.figures import save_figure

    series = {name: series_of(rows, name) for name, rows in sorted(runs.items())}
    rates = sorted({name.split("+")[1].split("-s")[0] for name in series}, key=lambda r: float(r[2:]), reverse=True)
    colours = dict(zip(rates, ["tab:red", "tab:blue", "tab:green", "tab:purple"], strict=False))
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    panels = [
        ("val/heldout/avg@4", "held-out avg@4 (343 problems x 4)"),
        ("train/reward", "training reward, 20-step mean"),
    ]
    panels.append(("train/entropy", "entropy (nats), 20-step mean"))
    for ax, (metric, title) in zip(axes, panels, strict=True):
        for name, s in series.items():
            rate = name.split("+")[1].split("-s")[0]
            if metric.startswith("val/"):
                steps, values = zip(*((step + (step > 0), v) for step, v in s[metric]), strict=True)
            else:
                steps, values = zip(*trailing_means(s[metric], 20), strict=True)
            label = f"{rate[2:]}" if name.endswith("-s0") else None
            ax.plot(steps, values, color=colours[rate], alpha=0.6, linewidth=1, label=label)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("optimizer updates")
        ax.grid(alpha=0.3)
    axes[0].legend(title="learning rate (6 seeds each)", fontsize=8, title_fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def atlas_verdicts(here: Path = HERE) -> list[Path]:
    """PROTOCOL.md Part 2's verdicts (``verdicts.py``) of ``logs/atlas/*.tar.xz`` in ``atlas/``, at the seeds per cell
    of ``pilot/power.md``; nothing where no atlas archive exists (none before Part 2a's seeds count is committed)."""
    archives = sorted((here / "logs" / "atlas").glob("*.tar.xz"))
    if not archives:
        return []
    if str(HERE.parents[1]) not in sys.path:  # run as a script: its siblings by the names the tests import
        sys.path.insert(0, str(HERE.parents[1]))
    from experiments.atlas.verdicts import seeds_rule, write_verdicts

    power = here / "pilot" / "power.md"
    return write_verdicts(archives, here / "atlas", *seeds_rule(power.read_text() if power.is_file() else ""))


def main() -> None:
    out = HERE / "pilot"
    out.mkdir(exist_ok=True)
    (out / "dial.md").write_text(
        "# The mismatch dial, measured from runs (PROTOCOL.md Part 1a)\n\n"
        + dial_table(read_runs(HERE / "logs" / "pilot" / "dial.tar.xz"))
    )
    print((out / "dial.md").read_text())
    control = HERE / "logs" / "pilot" / "control.tar.xz"
    if control.is_file():
        runs = read_runs(control)
        (out / "rate.md").write_text("# The learning rate (PROTOCOL.md Part 1)\n\n" + rate_table(runs))
        print((out / "rate.md").read_text())
        control_figure(runs, out / "control.png")
    power = HERE / "logs" / "pilot" / "power.tar.xz"
    if power.is_file():
        (out / "power.md").write_text("# Seeds per cell (PROTOCOL.md Part 2)\n\n" + power_table(read_runs(power)))
        print((out / "power.md").read_text())
    for path in atlas_verdicts():
        print(f"written: {path.relative_to(HERE)}")


if __name__ == "__main__":
    main()
