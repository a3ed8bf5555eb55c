"""What the Lightning components may ask of each other, declared: the data module of the policy module,
callbacks of both. Shared settings travel by ``LightningCLI.link_arguments`` (``stable_rl.cli``); the
lookups of ``trainer.lightning_module`` and ``trainer.datamodule`` are here and nowhere else."""

from collections.abc import Iterator
from typing import Any, Protocol

import lightning as L
from torch import Tensor, nn

from stable_rl.metrics import StepMetrics
from stable_rl.policy.runtime import ModelRuntime


class PolicyWeights(Protocol):
    """What a data module reads of the policy module: its current weights, to sync the rollout engine."""

    def full_weights(self) -> Iterator[tuple[str, Tensor]]: ...


class GenerationLogprobs(Protocol):
    """What a pipelining data module (``data.max_staleness`` >= 1) asks of the policy module: log pi_gen of a
    rollout generated from its current weights, or from a snapshot of the weights taken when the rollout started
    (``data.overlap``: the update changes them while it is generated)."""

    def weight_snapshot(self) -> Any: ...

    def generation_logprobs(self, batch, weights=None) -> Tensor: ...


class RouteSource(Protocol):
    """What a callback may ask of the data module: rollouts that carry their routed experts."""

    def request_routes(self) -> None: ...


class TrainedPolicy(Protocol):
    """What a callback may read of the policy module in a training step, and log into it (``step_metrics``
    are logged as ``train/<name>`` at the end of the step)."""

    policy: nn.Module
    step_metrics: StepMetrics
    runtime: ModelRuntime  # e.g. forwards on packed rows (``runtime.packed_sequences``, ``stable_rl.policy.packing``)

    def batch_logprobs(self, batch, entropy: bool = True) -> tuple[Tensor, Tensor | None]: ...


def conforms(obj: object, protocol: type) -> bool:
    """Whether ``obj`` has every member ``protocol`` declares, looked up as ``obj.name`` would be. Not
    ``isinstance`` on a runtime-checkable protocol: from Python 3.12 that looks members up statically and so
    misses an ``nn.Module``'s submodules (``policy``), which live behind ``__getattr__``."""
    declared = set(getattr(protocol, "__annotations__", {}))
    declared |= {name for name, member in vars(protocol).items() if callable(member) and not name.startswith("_")}
    return all(hasattr(obj, name) for name in declared)


def policy_weights(trainer: L.Trainer) -> PolicyWeights:
    """The trainer's module, as a source of weights."""
    return _policy_module(trainer, PolicyWeights, "full_weights() to sync the rollout engine with")


def generation_logprobs(trainer: L.Trainer) -> GenerationLogprobs:
    """The trainer's module, as the scorer of rollouts in flight."""
    return _policy_module(trainer, GenerationLogprobs, "generation_logprobs() to score rollouts in flight with")


def _policy_module(trainer: L.Trainer, protocol: type, missing: str) -> Any:
    """The trainer's module as ``protocol``, or a TypeError saying it has no ``missing``."""
    module = trainer.lightning_module
    if not conforms(module, protocol):
        raise TypeError(f"{type(module).__name__} has no {missing}: train a stable_rl.rl.PolicyModule")
    return module


def route_source(trainer: L.Trainer) -> RouteSource | None:
    """The trainer's data module if it can return routes, else None."""
    datamodule = getattr(trainer, "datamodule", None)
    return datamodule if conforms(datamodule, RouteSource) else None


def trained_policy(module: L.LightningModule, who: str) -> TrainedPolicy:
    """``module`` as a ``TrainedPolicy``, or a TypeError naming ``who`` needs one."""
    if not conforms(module, TrainedPolicy):
        raise TypeError(
            f"{who} wraps the forwards of a policy module (policy, step_metrics, runtime, batch_logprobs): train a "
            f"stable_rl.rl.PolicyModule, not a {type(module).__name__}"
        )
    return module
