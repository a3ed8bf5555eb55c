"""Warn, and optionally stop with a checkpoint, when a run shows the paper's signs of collapse (the
collapse criterion of the stability frontier, ``experiments/frontier/README.md``)."""

from collections import deque
from pathlib import Path

import lightning as L
from lightning.pytorch.utilities import rank_zero_warn

from stable_rl import StableRLWarning

HISTORY = ("entropy", "kl_k3", "reward", "skipped_updates")  # train/<name> series the signs are judged on


class InstabilityMonitor(L.Callback):
    """Watches every global step for entropy collapse or explosion, training-inference KL spikes, reward
    collapse (the failure modes of paper Figs. 1-4) and non-finite updates, each judged on the mean of the
    last ``window`` steps and raised once it has held for ``patience`` steps in a row. Set a threshold to
    null to skip a check. A raised sign logs ``train/instability`` and ``train/instability/<sign>`` (1.0).

    Args:
        min_entropy: entropy collapse: mean ``train/entropy`` below this (nats per token).
        max_entropy: entropy explosion: mean ``train/entropy`` above this.
        max_kl: KL spike: mean ``train/kl_k3`` (KL[mu_old || pi_old]) above this.
        reward_drop: reward collapse: mean ``train/reward`` below (1 - reward_drop) x its best mean so far.
        max_skipped_updates: non-finite updates: mean ``train/skipped_updates`` (updates skipped as
            non-finite per global step) above this; 0 = any skipped update in the window.
        window: steps averaged before comparing.
        patience: consecutive steps a sign must hold.
        stop: also save a checkpoint (``instability-step=<n>.ckpt`` in ``dirpath``, default the logger's
            ``checkpoints`` folder) and stop training.
        dirpath: where the stop checkpoint goes.
    """

    def __init__(
        self,
        min_entropy: float | None = 0.02,
        max_kl: float | None = 0.05,
        reward_drop: float | None = 0.5,
        max_entropy: float | None = None,
        max_skipped_updates: float | None = None,
        window: int = 5,
        patience: int = 3,
        stop: bool = False,
        dirpath: str | None = None,
    ) -> None:
        if window < 1 or patience < 1:
            raise ValueError(f"InstabilityMonitor window={window} and patience={patience} must be >= 1")
        if reward_drop is not None and not 0 < reward_drop < 1:
            raise ValueError(f"InstabilityMonitor reward_drop={reward_drop} must be in (0, 1), or null to skip it")
        self.thresholds = {
            "min_entropy": min_entropy,
            "max_entropy": max_entropy,
            "max_kl": max_kl,
            "reward_drop": reward_drop,
            "max_skipped_updates": max_skipped_updates,
        }
        self.window = window
        self.patience = patience
        self.stop = stop
        self.dirpath = dirpath
        self.history: dict[str, deque[float]] = {name: deque(maxlen=window) for name in HISTORY}
        self.best_reward = float("-inf")
        self.streaks: dict[str, int] = {}
        self.incidents: list[tuple[int, str]] = []  # (step, sign) whenever a sign is raised

    def state_dict(self) -> dict:
        """Kept in Lightning checkpoints, so a resumed run judges on the same history."""
        return {
            "history": {name: list(values) for name, values in self.history.items()},
            "best_reward": self.best_reward,
            "streaks": dict(self.streaks),
            "incidents": list(self.incidents),
        }

    def load_state_dict(self, state: dict) -> None:
        for name, values in state["history"].items():  # a checkpoint from before a series was kept lacks it
            self.history[name] = deque(values, maxlen=self.window)
        self.best_reward = state["best_reward"]
        self.streaks = dict(state["streaks"])
        self.incidents = [tuple(incident) for incident in state["incidents"]]

    def signs(self) -> dict[str, str]:
        """The signs present after the latest step: name -> description."""
        mean = {name: sum(v) / len(v) for name, v in self.history.items() if len(v) == self.window}
        found = {}
        if (
            self.thresholds["min_entropy"] is not None
            and mean.get("entropy", float("inf")) < self.thresholds["min_entropy"]
        ):
            found["entropy_collapse"] = f"entropy {mean['entropy']:.4f} < min_entropy {self.thresholds['min_entropy']}"
        if self.thresholds["max_entropy"] is not None and mean.get("entropy", 0.0) > self.thresholds["max_entropy"]:
            found["entropy_explosion"] = f"entropy {mean['entropy']:.4f} > max_entropy {self.thresholds['max_entropy']}"
        if self.thresholds["max_kl"] is not None and mean.get("kl_k3", 0.0) > self.thresholds["max_kl"]:
            found["kl_spike"] = f"training-inference KL {mean['kl_k3']:.4g} > max_kl {self.thresholds['max_kl']}"
        if self.thresholds["reward_drop"] is not None and "reward" in mean:
            floor = (1 - self.thresholds["reward_drop"]) * self.best_reward
            if mean["reward"] < floor:
                found["reward_collapse"] = f"reward {mean['reward']:.4f} < {floor:.4f} ({self.best_reward:.4f} at best)"
            self.best_reward = max(self.best_reward, mean["reward"])
        limit = self.thresholds["max_skipped_updates"]
        if limit is not None and mean.get("skipped_updates", 0.0) > limit:
            found["nonfinite_updates"] = f"{mean['skipped_updates']:.2f} non-finite updates per step > {limit}"
        return found

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int
    ) -> None:
        for name, values in self.history.items():
            value = trainer.callback_metrics.get(f"train/{name}")
            if value is not None:
                values.append(float(value))
        found = self.signs()
        self.streaks = {name: self.streaks.get(name, 0) + 1 for name in found}
        raised = [name for name, streak in self.streaks.items() if streak == self.patience]
        if not raised:
            return
        step = trainer.global_step
        self.incidents += [(step, name) for name in raised]
        message = "; ".join(found[name] for name in raised)
        pl_module.log("train/instability", 1.0)
        for name in raised:
            pl_module.log(f"train/instability/{name}", 1.0)
        if not self.stop:
            rank_zero_warn(f"instability at step {step} for {self.patience} steps: {message}", category=StableRLWarning)
            return
        path = Path(self.dirpath or Path(trainer.log_dir or trainer.default_root_dir) / "checkpoints")
        path = path / f"instability-step={step}.ckpt"
        trainer.save_checkpoint(path)
        trainer.should_stop = True
        rank_zero_warn(
            f"instability at step {step}: {message}; stopping, checkpoint kept at {path}", category=StableRLWarning
        )
