"""The atlas's figures (PROTOCOL.md Part 2): each cell's seeds as curves over updates, like ``pilot/control.png``, and
one map of the atlas (methods as rows, dial levels as columns: the share of seeds collapsed, held-out after H)."""

import math
import statistics
from pathlib import Path

from experiments.atlas.endpoints import CellResult, method_of
from experiments.atlas.plan import LEVELS
from stable_rl.analysis.figures import save_figure
from stable_rl.analysis.heldout_pairs import avg_at
from stable_rl.analysis.survival import trailing_means


def curves_figure(result: CellResult, path: Path) -> None:
    """One line per seed: held-out avg@4 after n updates, and the trailing means of training reward and entropy
    that the collapse rule reads (20 rows on-policy, ceil(20 / N) off-policy); a cross where a seed collapsed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    window = math.ceil(20 / result.cell.updates_per_row)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    titles = ["held-out avg@4 (343 problems x 4)", f"training reward, {window}-row mean", "entropy (nats), mean"]
    for index, run in enumerate(result.runs):
        colour = f"C{index % 10}"
        axes[0].plot(*zip(*sorted(run.heldout.items()), strict=True), color=colour, alpha=0.7, label=f"s{run.seed}")
        for ax, metric in zip(axes[1:], ("train/reward", "train/entropy"), strict=True):
            means = trailing_means(run.curves.get(metric, []), window)
            if means:
                ax.plot(*zip(*means, strict=True), color=colour, alpha=0.7, linewidth=1)
        if run.survival.collapsed:
            axes[1].axvline(run.survival.time, color=colour, linestyle=":", linewidth=1)
    for ax, title in zip(axes, titles, strict=True):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("optimizer updates")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, ncol=2)
    fig.suptitle(f"{result.cell.level}, {method_of(result.cell)} (dotted: collapse)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def atlas_figure(results: list[CellResult], path: Path) -> None:
    """Methods as rows, levels as columns: the share of the seeds run that collapsed, and held-out avg@4 after H
    (mean over seeds that reached H); each cell annotated, with "k/n" where it is not complete; blank: not run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    methods = list(dict.fromkeys(method_of(r.cell) for r in results))
    levels = list(LEVELS)
    shares, heldout = np.full((len(methods), len(levels)), np.nan), np.full((len(methods), len(levels)), np.nan)
    notes: dict[tuple[int, int], tuple[str, str]] = {}
    for r in results:
        if not r.runs:
            continue
        row, col = methods.index(method_of(r.cell)), levels.index(r.cell.level)
        shares[row, col] = r.collapsing / len(r.runs)
        ends = [avg_at(run.final) for run in r.runs if run.final is not None]
        heldout[row, col] = statistics.fmean(ends) if ends else np.nan
        run_part = "" if r.complete else f"\n{len(r.runs)}/{r.cell.seeds}"
        notes[row, col] = (f"{r.collapsing}/{len(r.runs)}{run_part}", f"{heldout[row, col]:.2f}{run_part}")
    fig, axes = plt.subplots(1, 2, figsize=(13, 0.32 * len(methods) + 1.6))
    panels = [(shares, "share of seeds collapsed", "Reds", 1.0), (heldout, "held-out avg@4 after H", "Blues", 0.4)]
    for index, (ax, (grid, title, colours, top)) in enumerate(zip(axes, panels, strict=True)):
        vmax = max(top, float(np.nanmax(grid))) if np.isfinite(grid).any() else top
        ax.imshow(grid, cmap=colours, vmin=0, vmax=vmax, aspect="auto")
        for (row, col), texts in notes.items():
            dark = grid[row, col] > vmax / 2  # white on the darker half of the colour map
            ax.text(col, row, texts[index], ha="center", va="center", fontsize=6, color="white" if dark else "black")
        ax.set_xticks(range(len(levels)), levels)
        ax.set_yticks(range(len(methods)), methods if index == 0 else [""] * len(methods), fontsize=7)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("dial level (mismatch grows to the right)")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
