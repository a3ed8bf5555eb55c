"""Rollouts in flight: generated, waiting ``data.max_staleness`` = k steps to be trained on.

One-step-off-policy pipelining (k = 1) lets a system generate the batch of step t + 1 while step t trains. The
paper's runs are synchronous (its off-policy setting is N mini-batches per rollout); this is the staleness that
pipelining adds, run here in sequence with the same numbers an overlap of generation and training would give:
at step t the engine, synced to the weights of step t, generates the batch of step t + k, and the batch generated
k steps earlier is trained on. MiniRL's weight pi_old/mu_old (pi_old recomputed by the trainer at step t, mu_old
the engine's log-probs) then corrects the staleness as well as the training-inference mismatch.
"""

from collections import deque
from dataclasses import fields

from stable_rl.rollout import RolloutBatch


class InFlight:
    """The queue of rollouts generated ahead, oldest first, saved in checkpoints so that resume stays exact."""

    def __init__(self, max_staleness: int) -> None:
        self.max_staleness = max_staleness
        self.batches: deque[RolloutBatch] = deque()

    def missing(self) -> range:
        """Positions in the window of the k + 1 steps from now (0: this step) whose batch is still to be
        generated: all of them at the start (a fresh run, or a checkpoint without rollouts in flight), else the
        last, k steps ahead."""
        return range(len(self.batches), self.max_staleness + 1)

    def state_dict(self) -> dict:
        """The rollouts in flight, each as its fields (tensors on the CPU; the plan is the run's own)."""
        if not self.batches:
            return {}
        return {"in_flight": [{f.name: getattr(b, f.name) for f in fields(b) if f.init} for b in self.batches]}

    def load_state_dict(self, state: dict) -> None:
        saved = state.get("in_flight", [])
        if len(saved) > self.max_staleness:
            raise ValueError(
                f"the checkpoint holds {len(saved)} rollouts in flight, more than data.max_staleness="
                f"{self.max_staleness} allows: resume with data.max_staleness={len(saved)} or more"
            )
        self.batches = deque(RolloutBatch(**batch) for batch in saved)
