"""Per-step training metrics as torchmetrics (reduced across ranks when distributed)."""

import torch
from torch import Tensor
from torchmetrics import CatMetric, MaxMetric, MeanMetric, Metric, SumMetric


class StepMetrics:
    """Collects means, maxima and quantiles of one global step, across its micro-batches and ranks."""

    def __init__(self) -> None:
        self._metrics: dict[str, Metric] = {}
        self._quantiles: dict[str, float] = {}  # name -> q, for the CatMetric of that name

    def _metric(self, name: str, kind: type[Metric], device: torch.device) -> Metric:
        if name not in self._metrics:
            self._metrics[name] = (kind() if kind is WeightedMean else kind(nan_strategy="disable")).to(device)
        return self._metrics[name]

    def mean(self, name: str, values: Tensor, mask: Tensor | None = None, weight: Tensor | None = None) -> None:
        """Add ``values`` (restricted to ``mask`` where given) to the running mean ``name``; with ``weight`` (same
        shape) the mean is sum(weight * value) / sum(weight) over the step, a ``WeightedMean``."""
        values = values.detach().float()
        if mask is not None:
            values = values[mask]
        if weight is None:
            self._metric(name, MeanMetric, values.device).update(values)
            return
        weight = weight.detach().float()
        self._metric(name, WeightedMean, values.device).update(values, weight[mask] if mask is not None else weight)

    def total(self, name: str, value: Tensor) -> None:
        """Add ``value`` to the step's running sum ``name``."""
        self._metric(name, SumMetric, value.device).update(value.detach().float())

    def max(self, name: str, values: Tensor, mask: Tensor | None = None) -> None:
        """Add ``values`` (restricted to ``mask``) to the running maximum ``name``."""
        values = values.detach().float()
        if mask is not None:
            values = values[mask]
        if values.numel():
            self._metric(name, MaxMetric, values.device).update(values)

    def quantile(self, name: str, values: Tensor, mask: Tensor, q: float) -> None:
        """Add ``values`` at ``mask`` to the samples whose ``q``-quantile is ``name``."""
        values = values.detach().float()[mask]
        self._quantiles[name] = q
        self._metric(name, CatMetric, values.device).update(values)

    def compute(self) -> dict[str, Tensor]:
        """The step's values (synced across ranks); starts a new step."""
        values = {}
        for name, metric in self._metrics.items():
            value = metric.compute()
            if name in self._quantiles:  # CatMetric: all values (an empty list if none came)
                value = quantile(
                    value.flatten() if isinstance(value, Tensor) else torch.empty(0), self._quantiles[name]
                )
            values[name] = value
        self._metrics, self._quantiles = {}, {}
        return values


class WeightedMean(Metric):
    """sum(weight * value) / sum(weight), summed across ranks; NaN before any weight. (torchmetrics 1.9's
    ``MeanMetric(nan_strategy="disable")`` replaces the weights it is given by ones.)"""

    def __init__(self) -> None:
        super().__init__()
        self.add_state("weighted_sum", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("weight", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, values: Tensor, weight: Tensor) -> None:
        self.weighted_sum += (values.double() * weight.double()).sum()
        self.weight += weight.double().sum()

    def compute(self) -> Tensor:
        return (self.weighted_sum / self.weight).float()


def quantile(values: Tensor, q: float) -> Tensor:
    """The q-quantile of a 1-D tensor, linearly interpolated as ``torch.quantile`` does (which refuses
    more than 2^24 values, fewer than one step of a large run has tokens); NaN when empty; float32."""
    if values.numel() == 0:
        return torch.tensor(float("nan"), device=values.device)
    ordered = values.double().sort().values
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return (ordered[low] + (ordered[high] - ordered[low]) * (position - low)).float()


def token_kl(sampler_logprobs: Tensor, logprobs: Tensor) -> Tensor:
    """Per-token estimate of KL(sampler || pi) on tokens drawn from the sampler (Schulman's k3):
    r - 1 - log r with r = pi / sampler. Unbiased (E_sampler[r] = 1), never negative, and of far lower
    variance than the plain log-ratio. Tensors of any shape -> the same shape."""
    log_ratio = logprobs - sampler_logprobs
    return log_ratio.exp() - 1 - log_ratio


def pass_at_k(correct: Tensor, k: int) -> Tensor:
    """Unbiased pass@k per problem (Chen et al., 2021): 1 - C(n - c, k) / C(n, k).

    ``correct`` [P, n] of 0/1 (n samples per problem, c of them correct) -> [P], for 1 <= k <= n.
    """
    n = correct.shape[-1]
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n samples per problem, got n={n}")
    failures = n - correct.sum(-1).double()  # [P]
    # C(f, k) / C(n, k) = prod_{i=0}^{k-1} (f - i) / (n - i), zero once f < k
    ratios = (failures[:, None] - torch.arange(k, dtype=torch.float64, device=correct.device)).clamp(min=0)
    return (1 - (ratios / (n - torch.arange(k, dtype=torch.float64, device=correct.device))).prod(-1)).float()


class PassAtK(Metric):
    """Mean over problems of the unbiased pass@k; ``update(correct [P, n])``."""

    full_state_update = False

    def __init__(self, k: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.k = k
        self.add_state("total", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("problems", default=torch.tensor(0), dist_reduce_fx="sum")

    def update(self, correct: Tensor) -> None:
        self.total += pass_at_k(correct, self.k).double().sum()
        self.problems += correct.shape[0]

    def compute(self) -> Tensor:
        return (self.total / self.problems.clamp(min=1)).float()


class AvgAtK(PassAtK):
    """The paper's metric: accuracy averaged over the n samples of each problem, then over problems.

    Equal to pass@1; ``update(correct [P, n])``.
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(k=1, **kwargs)


class ProblemCount(Metric):
    """How many problems a validation evaluated, summed over processes (an evaluation set's size after training
    questions are removed; processes sharing a vLLM engine each count its problems); ``update(correct [P, n])``."""

    full_state_update = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("problems", default=torch.tensor(0), dist_reduce_fx="sum")

    def update(self, correct: Tensor) -> None:
        self.problems += correct.shape[0]

    def compute(self) -> Tensor:
        return self.problems.float()
