"""Callbacks that wrap every policy forward of a training step (the pi_old pass and each update)."""

from contextlib import AbstractContextManager, nullcontext
from typing import Literal

import lightning as L

Phase = Literal["old", "update"]  # the no-grad pi_old recompute, or a micro-batch of an update


class PolicyForwardCallback(L.Callback):
    """A callback whose ``policy_forward`` context surrounds each forward (and backward) of the policy
    inside ``PolicyModule.training_step``, e.g. to record or replay MoE routes."""

    def policy_forward(self, module: L.LightningModule, phase: Phase, batch) -> AbstractContextManager:
        """The context for one forward of ``batch`` (a ``RolloutBatch`` micro-batch) in ``phase``."""
        return nullcontext()
