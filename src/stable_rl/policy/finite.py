"""What must be finite for training to mean anything: the learning rate, checked when the optimizer is built
(torch's optimizers accept an infinite rate, which makes every weight non-finite after the first update, and
a rate of 0, which never trains), and the state the non-finite guard saves as the last good one (an update
with a finite loss and gradient can still make weights or optimizer state non-finite: too large a rate, an
overflow)."""

import math

import torch
from torch import Tensor, nn
from torch.distributed.tensor import DTensor
from torch.optim import Optimizer


def check_learning_rate(optimizer: Optimizer) -> None:
    """Refuse a learning rate that is not a finite number > 0 (before a schedule scales it: warm-ups start at 0)."""
    for group in optimizer.param_groups:
        lr = float(group["lr"])
        if not (math.isfinite(lr) and lr > 0):
            raise ValueError(
                f"model.init_args.optimizer.init_args.lr={lr} must be a finite number > 0: an infinite or NaN rate "
                "makes every weight non-finite, a rate of 0 never trains and a negative one climbs the loss. Set "
                "the rate you mean, e.g. 1.0e-5"
            )


def first_nonfinite(policy: nn.Module, optimizer: Optimizer) -> str | None:
    """The name of this process's first weight, or optimizer state of a weight, holding a NaN or inf; None if
    all are finite (each process checks its own shards)."""
    names = {parameter: name for name, parameter in policy.named_parameters()}
    for parameter, name in names.items():
        if not _finite(parameter):
            return name
    for parameter, state in optimizer.state.items():
        for key, value in state.items():
            if isinstance(value, Tensor) and value.is_floating_point() and not _finite(value):
                return f"optimizer state '{key}' of {names.get(parameter, 'a weight')}"
    return None


def _finite(tensor: Tensor) -> bool:
    local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
    return bool(torch.isfinite(local.detach()).all())
