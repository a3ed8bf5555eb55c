"""A copy of a module's weights, to run the module with them later (log pi_gen of a rollout generated while the
weights that generated it were being updated, ``data.overlap``)."""

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn


class WeightSnapshot:
    """The parameters of ``module`` now, cloned where they live: one more copy of the weights in memory (on their
    device; the process's shard under FSDP2) for as long as the snapshot lives. Buffers are not kept (training
    does not change them)."""

    @torch.no_grad()
    def __init__(self, module: nn.Module) -> None:
        self.weights = [p.detach().clone() for p in module.parameters()]

    @contextmanager
    def loaded(self, module: nn.Module) -> Iterator[None]:
        """``module`` runs with the snapshot's weights inside, and with its own again after: the two are swapped in
        place, tensor by tensor (the parameters stay the same objects, so optimizers and sharding keep theirs)."""
        params = list(module.parameters())
        if len(params) != len(self.weights):
            raise RuntimeError(f"the snapshot holds {len(self.weights)} weights, the module {len(params)}")
        self._swap(params)
        try:
            yield
        finally:
            self._swap(params)

    @torch.no_grad()
    def _swap(self, params: list[nn.Parameter]) -> None:
        for param, kept in zip(params, self.weights, strict=True):
            current = param.detach().clone()  # one tensor at a time: the swap adds the largest weight's size
            param.copy_(kept)
            kept.copy_(current)
