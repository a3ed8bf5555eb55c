"""Packed (padding-free) rows: the real tokens of a right-padded batch as one row, each sequence restarting
its positions, so no padding position is computed.

transformers reads the restarts from ``position_ids`` when no attention mask is given and keeps each
sequence to its own tokens (a block-diagonal causal mask; FlashAttention-2 and flex attention skip the
blocks across sequences, SDPA and eager compute the whole pack's square under the mask)."""

from torch import Tensor

from stable_rl.padding import check_right_padded


def pack(input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
    """Right-padded ``input_ids``, ``attention_mask`` [M, L] -> (input_ids [1, T], position_ids [1, T]) of the T
    real tokens, row after row; positions count from 0 in every row."""
    check_right_padded(attention_mask, "packed_sequences=True", "turn packed_sequences off")
    real = attention_mask.bool()
    positions = real.cumsum(-1) - 1
    return input_ids[real][None], positions[real][None]


def unpack(packed: Tensor, attention_mask: Tensor, fill: float | int = 0) -> Tensor:
    """Values of the T packed tokens, [T, ...], back at their positions of the batch: [M, L, ...], ``fill`` at
    padding (differentiable in ``packed``)."""
    real = attention_mask.bool()
    out = packed.new_full((*real.shape, *packed.shape[1:]), fill)
    return out.index_put((real,), packed)
