"""At the end of a fit: a short summary on the console and a PNG of the run's curves."""

import math
from pathlib import Path

import lightning as L

from stable_rl.analysis.figures import save_figure

CURVES = (
    "train/reward",
    "train/kl",
    "train/entropy",
    "train/kl_k3",
    "train/kl_k3_no_replay",  # with Routing Replay R3
    "train/routing/infer_agreement",
)
SAME_PANEL = {"train/kl_k3_no_replay": "train/kl_k3"}  # drawn on the axes of the other, to compare them


class TrainingReport(L.Callback):
    """Keeps reward, training-inference KL, entropy and validation accuracy per step; at the end of
    training prints first/last values and writes ``report.png`` into the logger's directory.

    Args:
        filename: name of the figure in the log directory.
    """

    def __init__(self, filename: str = "report.png") -> None:
        self.filename = filename
        self.history: dict[str, list[tuple[int, float]]] = {}

    def _record(self, trainer: L.Trainer, prefixes: tuple[str, ...]) -> None:
        for name, value in trainer.callback_metrics.items():
            if name.startswith(prefixes) and value.numel() == 1:
                self.history.setdefault(name, []).append((trainer.global_step, float(value)))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._record(trainer, CURVES)

    def on_validation_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self._record(trainer, ("val/",))

    def state_dict(self) -> dict:
        return {"history": self.history}  # a resumed run's report covers the whole run

    def load_state_dict(self, state_dict: dict) -> None:
        self.history = state_dict["history"]

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        log_dir = Path(trainer.log_dir or trainer.default_root_dir)  # a collective under DDP: every rank asks
        curves = {k: v for k, v in self.history.items() if k in CURVES or "/avg@" in k}
        if not curves or not trainer.is_global_zero:
            return
        width = max(map(len, curves))
        lines = [f"{'metric':<{width}}  {'first':>9}  {'last':>9}  (steps)"]
        for name, points in sorted(curves.items()):
            (s0, v0), (s1, v1) = points[0], points[-1]
            lines.append(f"{name:<{width}}  {v0:9.4f}  {v1:9.4f}  ({s0} -> {s1})")
        path = log_dir / self.filename
        self.plot(curves, path, title=run_title(trainer, pl_module))
        print("\n".join(["", "stable-rl summary", *lines, f"curves: {path}"]))

    @staticmethod
    def plot(curves: dict[str, list[tuple[int, float]]], path: Path, title: str = "") -> dict[str, list[str]]:
        """Write one panel per curve (``SAME_PANEL`` pairs share one) to ``path``, each training curve raw (faint)
        and smoothed (``smoothed``), under ``title``, in the order of ``CURVES`` then validation; a KL that never leaves float rounding (``float_noise``) gets
        no panel, only a line under the title. Rows of 3, 2 or 1 panels fill the width. Returns the panels."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        noise = sorted(name for name in curves if float_noise(name, curves[name]))
        panels: dict[str, list[str]] = {}
        for name in sorted(set(curves) - set(noise)):
            partner = SAME_PANEL.get(name)
            panels.setdefault(partner if partner in curves and partner not in noise else name, []).append(name)
        fig = plt.figure(figsize=(13.5, 3.2 * max(1, len(row_sizes(len(panels))))))
        order = sorted(
            panels.items(), key=lambda panel: (CURVES.index(panel[0]) if panel[0] in CURVES else 99, panel[0])
        )
        for (title_of_panel, names), ax in zip(order, panel_axes(fig, len(panels)), strict=True):
            for name in names:
                steps, values = zip(*curves[name], strict=True)
                if name.startswith("train/") and len(steps) >= SMOOTH_FROM:
                    raw = ax.plot(steps, values, linewidth=0.8, alpha=0.35)
                    ax.plot(
                        steps, smoothed(values), color=raw[0].get_color(), linewidth=1.8, label=f"{name} (smoothed)"
                    )
                else:
                    ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3, label=name)
            if len(names) > 1:
                ax.legend(fontsize=7)
            ax.set_title(title_of_panel)
            ax.set_xlabel("optimizer step")
            ax.grid(alpha=0.3)
        notes = [
            f"{name}: |value| < {NOISE_FLOOR:g} at every step (max {max(abs(v) for _, v in curves[name]):.1e}): "
            "engine and policy agree to float rounding, not plotted"
            for name in noise
        ]
        fig.suptitle("\n".join([title, *notes]) if title or notes else "", fontsize=10)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        save_figure(fig, path)
        plt.close(fig)
        return panels


NOISE_FLOOR = 1e-5  # a KL estimate below this at every step is float rounding (float32 engine = policy: 1e-6..1e-9)
SMOOTH_FROM = 10  # training curves with at least this many points are drawn smoothed over the raw ones


def float_noise(name: str, points: list[tuple[int, float]]) -> bool:
    """Whether a training-inference KL curve stays below ``NOISE_FLOOR`` in size at every step."""
    return name.startswith("train/kl") and all(abs(value) < NOISE_FLOOR for _, value in points)


def smoothed(values: tuple[float, ...]) -> list[float]:
    """The centred running mean over a window of about a twentieth of the run (at least 3, odd), the window
    shrinking symmetrically at the ends so that the first and last points are their own values."""
    half = max(1, len(values) // 40)
    means = []
    for i in range(len(values)):
        reach = min(half, i, len(values) - 1 - i)
        window = values[i - reach : i + reach + 1]
        means.append(sum(window) / len(window))
    return means


def row_sizes(count: int) -> list[int]:
    """Panels per row: rows of at most 3, as even as they go (5 -> 3 + 2, 4 -> 2 + 2), so no slot is empty."""
    rows = math.ceil(count / 3)
    return [count // rows + (i < count % rows) for i in range(rows)]


def panel_axes(fig, count: int) -> list:
    """The axes of ``count`` panels in ``row_sizes`` rows, each row's panels sharing its full width."""
    grid = fig.add_gridspec(max(1, len(row_sizes(count))), 6)
    return [
        fig.add_subplot(grid[row, i * (6 // size) : (i + 1) * (6 // size)])
        for row, size in enumerate(row_sizes(count))
        for i in range(size)
    ]


def run_title(trainer: L.Trainer, module: L.LightningModule) -> str:
    """``<logger name>/version_<v>: <objective> on <model directory>`` (what the run is, as its log names it)."""
    logger = trainer.logger
    where = "run"
    if logger is not None and logger.name:
        version = logger.version if isinstance(logger.version, str) else f"version_{logger.version}"
        where = f"{logger.name}/{version}"
    objective = getattr(module, "objective", None)
    model = getattr(module, "model_path", None)
    what = " on ".join(
        part for part in (type(objective).__name__ if objective else "", Path(model).name if model else "") if part
    )
    return f"{where}: {what}" if what else where
