"""Callbacks, listed under ``trainer.callbacks`` in YAML."""

from stable_rl.callbacks.heldout_outcomes import HeldOutOutcomes
from stable_rl.callbacks.hf_export import HFExport
from stable_rl.callbacks.instability_monitor import InstabilityMonitor
from stable_rl.callbacks.policy_forward import PolicyForwardCallback
from stable_rl.callbacks.progress_bar import StepProgressBar
from stable_rl.callbacks.routing_replay import RoutingReplay
from stable_rl.callbacks.run_identity import RunIdentity
from stable_rl.callbacks.termination_checkpoint import TerminationCheckpoint
from stable_rl.callbacks.training_report import TrainingReport
from stable_rl.callbacks.validate_before_training import ValidateBeforeTraining

__all__ = [
    "HFExport",
    "HeldOutOutcomes",
    "InstabilityMonitor",
    "PolicyForwardCallback",
    "RoutingReplay",
    "RunIdentity",
    "StepProgressBar",
    "TerminationCheckpoint",
    "TrainingReport",
    "ValidateBeforeTraining",
]
