"""The stability frontier: under a learning-rate ramp, the learning rate at which each run collapsed.

A frontier run ramps the learning rate (e.g. ``ExponentialLR``, doubling every 20 global steps) and stops
at the first sign of collapse that ``InstabilityMonitor`` raises (``train/instability/<sign>``); Lightning's
``LearningRateMonitor`` logs the rate (``lr-<optimizer>``). A run that ends without a sign survived up to
its last rate if it reached the planned number of global steps (``--steps``); one that ended earlier
without a sign was cut off (a time limit) and is left out of medians and verdicts.
``stable-rl-report --frontier`` reads the runs' CSV logs and writes:

- ``frontier.png``: the collapse learning rate per variant, one dot per seed, the median as a bar,
  survivors as open triangles at the last rate they reached;
- ``aligned.png``: reward, entropy, KL k3 and the training-inference gap against steps to the collapse;
- ``heldout.png``: held-out accuracy per run; ``frontier.md``: the table, and each pair asked for
  judged by the decision rule of ``separated``.
"""

import math
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from stable_rl.analysis.collapse_signs import first_sign, last_logged_step
from stable_rl.analysis.figures import plot_family, save_figure
from stable_rl.analysis.run_logs import read_run

ALIGNED = ("train/reward", "train/entropy", "train/kl_k3", "train/health/train_infer_abs", "train/grad_norm")


@dataclass(frozen=True)
class Outcome:
    """One frontier run: its variant (the run name less ``-s<seed>``), where it collapsed or how far it got."""

    variant: str
    seed: int
    last_step: int
    last_lr: float
    collapse_step: int | None = None
    collapse_lr: float | None = None
    sign: str | None = None
    cut_off: bool = False  # ended before its planned steps without a sign: no outcome

    @property
    def frontier_lr(self) -> float:
        """The collapse learning rate; a survivor's is above every rate it reached (infinity)."""
        return self.collapse_lr if self.collapse_lr is not None else math.inf


def learning_rate(series: dict[str, list[tuple[int, float]]]) -> list[tuple[int, float]]:
    """The ``lr-*`` series of Lightning's ``LearningRateMonitor`` (the first optimizer's)."""
    names = sorted(name for name in series if name.startswith("lr-"))
    if not names:
        raise ValueError("no lr-* column: add lightning.pytorch.callbacks.LearningRateMonitor to the run's callbacks")
    return series[names[0]]


def rate_at(rates: list[tuple[int, float]], step: int) -> float:
    """The learning rate logged at ``step`` (the latest one logged up to it)."""
    return [lr for s, lr in rates if s <= step][-1]


def outcome(run_dir: Path, steps: int = 200) -> Outcome:
    """Read one CSVLogger version directory (``<save_dir>/<variant>-s<seed>/version_<n>``) of a run planned
    for ``steps`` global steps."""
    return outcome_of(run_dir.parent.name, read_run(run_dir), steps)


def outcome_of(name: str, series: dict[str, list[tuple[int, float]]], steps: int) -> Outcome:
    """The outcome of run ``name`` (``<variant>-s<seed>``) from its metric series."""
    rates = learning_rate(series)
    variant, _, seed = name.rpartition("-s")
    last_step = last_logged_step(series)
    base = Outcome(variant or name, int(seed) if seed.isdigit() else 0, last_step, rate_at(rates, last_step))
    first = first_sign(series)
    if first is None:
        return replace(base, cut_off=last_step + 1 < steps)
    step, sign = first
    return replace(base, collapse_step=step, collapse_lr=rate_at(rates, step), sign=sign)


def median_lr(outcomes: list[Outcome]) -> float:
    """The median collapse learning rate of the runs with an outcome (survivors above all); NaN if none."""
    judged = [o.frontier_lr for o in outcomes if not o.cut_off]
    return statistics.median(judged) if judged else math.nan


def apart(unstable: list[Outcome], stable: list[Outcome]) -> bool:
    """The rule's first half: every seed of ``unstable`` collapses below every seed of ``stable`` (survivors
    above all). False with a cut-off run (``verdict`` bounds it)."""
    if any(o.cut_off for o in unstable + stable):
        return False
    if not unstable or not stable or any(o.collapse_lr is None for o in unstable):
        return False
    return max(o.frontier_lr for o in unstable) < min(o.frontier_lr for o in stable)


def separated(unstable: list[Outcome], stable: list[Outcome], ratio: float = 2.0) -> bool:
    """The decision rule, fixed before the runs: ``stable`` holds where ``unstable`` collapses when the two are
    ``apart`` and the median collapse learning rates differ by at least ``ratio``."""
    return apart(unstable, stable) and median_lr(stable) >= ratio * median_lr(unstable)


def verdict(unstable: list[Outcome], stable: list[Outcome], seeds: int = 1) -> str:
    """The rule's answer for a pair as the table prints it: "yes", "no", or none while a variant has fewer
    runs than the ``seeds`` the rule was stated for, or while a cut-off seed could still decide it. A cut-off
    run would have collapsed, if at all, above the last rate it reached; the rule favours separation most when
    the unstable variant's cut-off runs collapse right there and the stable one's survive, least in the
    opposite case. If both agree, no outcome of the cut-off runs changes the answer
    (a control stopped by a time limit far above the other variant's collapses still separates from it).
    Seeds still to run can only add runs, which every seed must be apart from: runs already not ``apart``
    however their cut-off seeds end read "no" before all ``seeds`` have run."""

    def completed(runs: list[Outcome], collapse: bool) -> list[Outcome]:
        """Each cut-off run collapsing at its last rate (``collapse``) or surviving."""
        done = [replace(o, cut_off=False) for o in runs]
        return [
            replace(d, collapse_lr=o.last_lr) if o.cut_off and collapse else d for o, d in zip(runs, done, strict=True)
        ]

    if (fewest := min(len(unstable), len(stable))) < seeds:
        if fewest and not apart(completed(unstable, True), completed(stable, False)):
            return "no"
        return f"no verdict ({fewest} of {seeds} seeds)"
    if not any(o.cut_off for o in unstable + stable):
        return "yes" if separated(unstable, stable) else "no"
    if separated(completed(unstable, False), completed(stable, True)):
        return "yes"
    if not separated(completed(unstable, True), completed(stable, False)):
        return "no"
    return "no verdict (a seed cut off)"


def collapsed_mostly(runs: list[Outcome]) -> bool:
    """Whether most seeds collapsed: only then is the median a collapse rate to draw."""
    return sum(o.sign is not None for o in runs) * 2 > len(runs)


def by_variant(outcomes: list[Outcome]) -> dict[str, list[Outcome]]:
    variants: dict[str, list[Outcome]] = {}
    for o in outcomes:
        variants.setdefault(o.variant, []).append(o)
    return variants


def table(outcomes: list[Outcome], pairs: list[tuple[str, str]], seeds: int = 1) -> str:
    """Markdown: one row per variant (each seed's collapse, the median) and one per pair judged (``verdict``
    with the ``seeds`` the rule needs)."""
    lines = [
        "| variant | seeds | collapses (step: lr, sign) | survivors (last step: lr) | cut off (last step: lr) "
        "| median collapse lr |",
        "|---|---|---|---|---|---|",
    ]
    for variant, runs in by_variant(outcomes).items():
        runs = sorted(runs, key=lambda o: o.seed)
        fell = ", ".join(f"s{o.seed} {o.collapse_step}: {o.collapse_lr:.3g} {o.sign}" for o in runs if o.sign)
        held = ", ".join(f"s{o.seed} {o.last_step}: {o.last_lr:.3g}" for o in runs if not o.sign and not o.cut_off)
        cut = ", ".join(f"s{o.seed} {o.last_step}: {o.last_lr:.3g}" for o in runs if o.cut_off)
        lines.append(
            f"| {variant} | {len(runs)} | {fell or '-'} | {held or '-'} | {cut or '-'} | {median_lr(runs):.3g} |"
        )
    if pairs:
        variants = by_variant(outcomes)
        lines += ["", "| unstable | stable | median ratio | separated (rule) |", "|---|---|---|---|"]
        for unstable, stable in pairs:
            a, b = variants.get(unstable, []), variants.get(stable, [])
            ratio = median_lr(b) / median_lr(a) if a and b else math.nan
            lines.append(f"| {unstable} | {stable} | {ratio:.3g} | {verdict(a, b, seeds)} |")
    return "\n".join(lines)


HEALTH = ("train/grad_clipped", "train/kl_k3", "train/health/train_infer_abs", "train/routing/infer_agreement")


def health_table(runs: dict[str, dict], outcomes: dict[str, Outcome]) -> str:
    """Markdown: per variant, each health metric's mean over the steps before the collapse (all steps of a
    survivor), averaged over seeds: how often the clip fired, how large the training-inference gap was."""
    lines = ["| variant | " + " | ".join(HEALTH) + " |", "|---|" + "---|" * len(HEALTH)]
    for variant in dict.fromkeys(o.variant for o in outcomes.values()):
        cells = []
        for metric in HEALTH:
            means = []
            for label, o in outcomes.items():
                end = o.collapse_step if o.collapse_step is not None else o.last_step + 1
                values = [v for step, v in runs[label].get(metric, []) if step < end]
                if o.variant == variant and values:
                    means.append(statistics.fmean(values))
            cells.append(f"{statistics.fmean(means):.3g}" if means else "-")
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_frontier(outcomes: list[Outcome], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = by_variant(outcomes)
    fig, ax = plt.subplots(figsize=(1.3 * len(variants) + 2, 4))
    for x, runs in enumerate(variants.values()):
        for i, o in enumerate(sorted(runs, key=lambda o: o.seed)):
            dx = (i - (len(runs) - 1) / 2) * 0.08
            if o.sign:
                ax.plot(x + dx, o.collapse_lr, "o", color=f"C{x}")
            elif o.cut_off:
                ax.plot(x + dx, o.last_lr, "x", color=f"C{x}")
            else:
                ax.plot(x + dx, o.last_lr, "^", mfc="none", color=f"C{x}", markersize=8)
        if collapsed_mostly(runs):
            ax.hlines(median_lr(runs), x - 0.25, x + 0.25, color=f"C{x}", linewidth=2)
    ax.set_xticks(range(len(variants)), list(variants), rotation=30, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("learning rate at collapse")
    ax.set_title(  # two lines: a figure of few variants is narrower than one
        "stability frontier\ndot: a seed's collapse, bar: median, open triangle: survived to, x: cut off at", fontsize=9
    )
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def plot_aligned(runs: dict[str, dict], outcomes: dict[str, Outcome], path: Path) -> None:
    """Each collapsed run's health metrics against steps relative to its collapse, coloured by variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {variant: f"C{i}" for i, variant in enumerate(dict.fromkeys(o.variant for o in outcomes.values()))}
    fig, axes = plt.subplots(1, len(ALIGNED), figsize=(4.2 * len(ALIGNED), 3.4))
    for ax, metric in zip(axes, ALIGNED, strict=True):
        for label, series in runs.items():
            o = outcomes[label]
            if o.collapse_step is None or metric not in series:
                continue
            steps, values = zip(*series[metric], strict=True)
            ax.plot([s - o.collapse_step for s in steps], values, color=colours[o.variant], alpha=0.6, linewidth=1)
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_title(metric, fontsize=9)
        ax.set_xlabel("steps from the collapse")
        ax.set_yscale("log" if "kl" in metric or "abs" in metric or "grad" in metric else "linear")
        ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], color=c, label=v) for v, c in colours.items()]
    fig.legend(handles=handles, loc="upper center", ncol=min(len(handles), 6), fontsize=7)
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    save_figure(fig, path)
    plt.close(fig)


def frontier_report(
    run_dirs: list[Path], out: Path, pairs: list[tuple[str, str]], steps: int = 200, seeds: int = 3
) -> list[Outcome]:
    """Write ``frontier.png``, ``aligned.png``, ``heldout.png`` and ``frontier.md`` into ``out``; a pair is judged
    once each of its variants has ``seeds`` runs (the rule was stated for three)."""
    labels = [d.parent.name for d in run_dirs]
    if len(set(labels)) < len(labels):
        raise ValueError("two runs share a name: pass one version directory per <variant>-s<seed>")
    runs = {label: read_run(d) for label, d in zip(labels, run_dirs, strict=True)}
    outcomes = {label: outcome_of(label, series, steps) for label, series in runs.items()}
    out.mkdir(parents=True, exist_ok=True)
    plot_frontier(list(outcomes.values()), out / "frontier.png")
    plot_aligned(runs, outcomes, out / "aligned.png")
    heldout = sorted(
        {name for series in runs.values() for name in series if name.startswith("val/") and "avg@" in name}
    )
    if heldout:
        plot_family(runs, heldout, out / "heldout.png")
    body = table(list(outcomes.values()), pairs, seeds) + "\n\nBefore the collapse (means over steps, then seeds):\n\n"
    body += health_table(runs, outcomes)
    figures = "![frontier](frontier.png)\n\n![aligned](aligned.png)" + (
        "\n\n![heldout](heldout.png)" if heldout else ""
    )
    (out / "frontier.md").write_text(f"# Stability frontier\n\n{figures}\n\n{body}\n")
    return list(outcomes.values())
