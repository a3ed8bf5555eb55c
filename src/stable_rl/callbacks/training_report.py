"""At the end of a fit: a short summary on the console and a PNG of the run's curves."""

import math
from pathlib import Path

import lightning as L

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
        self.plot(curves, path)
        print("\n".join(["", "stable-rl summary", *lines, f"curves: {path}"]))

    @staticmethod
    def plot(curves: dict[str, list[tuple[int, float]]], path: Path) -> dict[str, list[str]]:
        """Write one panel per curve (``SAME_PANEL`` pairs share one) to ``path``; returns the panels."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        panels: dict[str, list[str]] = {}
        for name in sorted(curves):
            partner = SAME_PANEL.get(name)
            panels.setdefault(partner if partner in curves else name, []).append(name)
        cols = min(len(panels), 3)
        rows = math.ceil(len(panels) / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.2 * rows), squeeze=False)
        for ax, (title, names) in zip(axes.flat, sorted(panels.items()), strict=False):
            for name in names:
                steps, values = zip(*curves[name], strict=True)
                ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3, label=name)
            if len(names) > 1:
                ax.legend(fontsize=7)
            ax.set_title(title)
            ax.set_xlabel("optimizer step")
            ax.grid(alpha=0.3)
        for ax in list(axes.flat)[len(panels) :]:
            ax.axis("off")
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return panels
