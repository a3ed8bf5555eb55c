"""Per-step training metrics as torchmetrics (reduced across ranks when distributed)."""

import torch
from torch import Tensor
from torchmetrics import MaxMetric, MeanMetric, Metric


class StepMetrics:
    """Collects means and maxima of one global step, across its micro-batches and ranks."""

    def __init__(self) -> None:
        self._metrics: dict[str, Metric] = {}

    def _metric(self, name: str, kind: type[Metric], device: torch.device) -> Metric:
        if name not in self._metrics:
            self._metrics[name] = kind(nan_strategy="disable").to(device)
        return self._metrics[name]

    def mean(self, name: str, values: Tensor, mask: Tensor | None = None) -> None:
        """Add ``values`` (restricted to ``mask`` where given) to the running mean ``name``."""
        values = values.detach().float()
        if mask is not None:
            values = values[mask]
        self._metric(name, MeanMetric, values.device).update(values)

    def max(self, name: str, values: Tensor, mask: Tensor | None = None) -> None:
        """Add ``values`` (restricted to ``mask``) to the running maximum ``name``."""
        values = values.detach().float()
        if mask is not None:
            values = values[mask]
        if values.numel():
            self._metric(name, MaxMetric, values.device).update(values)

    def compute(self) -> dict[str, Tensor]:
        """The step's values (synced across ranks); starts a new step."""
        values = {name: metric.compute() for name, metric in self._metrics.items()}
        self._metrics = {}
        return values
