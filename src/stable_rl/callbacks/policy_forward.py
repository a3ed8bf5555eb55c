"""Callbacks that wrap every policy forward of a training step (the pi_old pass and each update)."""

from contextlib import AbstractContextManager, nullcontext
from typing import Literal

import lightning as L

from stable_rl.interfaces import TrainedPolicy

# "old": the no-grad pi_old recompute (mini-batches 2..N); "update": a micro-batch of an update;
# "first": a micro-batch of the first mini-batch's update, whose forward is also its pi_old pass;
# "generation": the no-grad log pi_gen pass of a rollout just generated, to be trained on data.max_staleness
# steps later (outside any training step: health metrics only, nothing to record or log)
Phase = Literal["old", "update", "first", "generation"]


class PolicyForwardCallback(L.Callback):
    """A callback whose ``policy_forward`` context surrounds each forward (and backward) of the policy
    inside ``PolicyModule.training_step``, e.g. to record or replay MoE routes; it reads and logs only what
    ``TrainedPolicy`` declares."""

    def policy_forward(self, module: TrainedPolicy, phase: Phase, batch) -> AbstractContextManager:
        """The context for one forward of ``batch`` (a ``RolloutBatch`` micro-batch) in ``phase``."""
        return nullcontext()
