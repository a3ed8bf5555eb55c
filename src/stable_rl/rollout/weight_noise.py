"""The mismatch dial: a seeded relative perturbation of the weights synced into a rollout engine, fresh at every
sync, so that mu_old departs from pi_old by a chosen amount, continuously, beyond what precision alone gives
(FP8 and below): a knob for how much training-inference mismatch a method survives (arXiv 2512.01374 attributes
its collapses to that mismatch; here it is dialled, not waited for).

Each floating-point weight W is synced as W * (1 + sigma * eps), eps ~ N(0, 1) elementwise, drawn from a generator
seeded by the engine's seed, the weights' version (the global step) and the weight's name: a sync of the same
step always gets the same noise, the next step new noise, and nothing depends on the order weights arrive in.
"""

import math
import zlib
from collections.abc import Iterable, Iterator

import torch
from torch import Tensor


def check_weight_noise(sigma: float) -> float:
    """Refuse a relative noise that is negative or not finite."""
    if not (math.isfinite(sigma) and sigma >= 0):
        raise ValueError(f"data.engine.init_args.weight_noise={sigma}: the relative noise must be a finite number >= 0")
    return sigma


def noise_seed(seed: int, version: int, name: str) -> int:
    """The generator seed of weight ``name`` synced at ``version`` by an engine seeded ``seed``."""
    return ((seed * 1_000_003 + version) * 1_000_003 + zlib.crc32(name.encode())) % (2**63 - 1)


def perturbed(
    named_tensors: Iterable[tuple[str, Tensor]], sigma: float, seed: int, version: int
) -> Iterator[tuple[str, Tensor]]:
    """The weights, each floating one times (1 + sigma * eps) (new tensors; the policy's are left alone)."""
    for name, tensor in named_tensors:
        if not tensor.is_floating_point():
            yield name, tensor
            continue
        generator = torch.Generator(device=tensor.device).manual_seed(noise_seed(seed, version, name))
        eps = torch.randn(tensor.shape, generator=generator, device=tensor.device, dtype=torch.float32)
        yield name, (tensor.float() * (1 + sigma * eps)).to(tensor.dtype)
