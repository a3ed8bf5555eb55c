"""One figure of a metric family: each metric's series of every run side by side, a held-out reward shaded by
its bounded standard errors (``stable_rl.analysis.heldout_change``); every figure of the package is written by
``save_figure``, small enough to commit beside the logs it shows."""

import io
import math
from fnmatch import fnmatch
from pathlib import Path

from stable_rl.analysis.heldout_change import HELDOUT, heldout_band


def save_figure(fig, path: Path, dpi: int = 80, colours: int = 64) -> None:
    """Write ``fig`` as a PNG of at most ``colours`` colours (an adaptive palette: line plots use a few, and
    anti-aliasing the rest), about a quarter of a full-colour PNG's size and the same to read."""
    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    buffer.seek(0)
    with Image.open(buffer) as image:
        image.convert("RGB").quantize(colors=colours, method=Image.Quantize.FASTOCTREE).save(path, optimize=True)


def plot_family(runs: dict[str, dict], metrics: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(len(metrics), 3)
    rows = math.ceil(len(metrics) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.4 * rows), squeeze=False)
    for ax, metric in zip(axes.flat, metrics, strict=False):
        for label, series in runs.items():
            if metric in series:
                steps, values = zip(*series[metric], strict=True)
                line = ax.plot(steps, values, label=label, marker="o" if len(steps) < 30 else None, markersize=3)
                band = heldout_band(series, metric) if fnmatch(metric, HELDOUT) else []
                if band:  # +- 2 bounded standard errors: the verdict's margin is sqrt(2) times this half-width
                    band_steps, low, high = zip(*band, strict=True)
                    ax.fill_between(band_steps, low, high, color=line[0].get_color(), alpha=0.12, linewidth=0)
        ax.set_title(metric)
        ax.set_xlabel("global step (logger step: one rollout batch, N updates)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(metrics) :]:
        ax.axis("off")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
