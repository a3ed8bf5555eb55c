"""Right-padding of (prompt, response) token rows, shared by rollout and SFT batches."""

import torch
from torch import Tensor


def right_pad(rows: list[tuple[list[int], list[int]]], pad_token_id: int) -> tuple[Tensor, Tensor, Tensor]:
    """``(prompt_ids, response_ids)`` rows -> input_ids [M, L], attention_mask [M, L], response_mask [M, L].

    ``response_mask[i, t]`` is True where token t of row i belongs to the response.
    """
    length = max(len(prompt) + len(response) for prompt, response in rows)
    input_ids = torch.full((len(rows), length), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros(len(rows), length, dtype=torch.bool)
    response_mask = torch.zeros(len(rows), length, dtype=torch.bool)
    for i, (prompt, response) in enumerate(rows):
        end = len(prompt) + len(response)
        input_ids[i, :end] = torch.tensor(prompt + response)
        attention_mask[i, :end] = True
        response_mask[i, len(prompt) : end] = True
    return input_ids, attention_mask, response_mask


def check_right_padded(
    attention_mask: Tensor, option: str = "padding_mask=False", fix: str = "keep the padding mask"
) -> None:
    """Raise unless every row of ``attention_mask`` [M, L] is real tokens followed by padding (as ``right_pad``
    makes them); the error names the ``option`` that needs them and the ``fix``."""
    if (attention_mask[:, 1:] > attention_mask[:, :-1]).any():
        raise ValueError(f"{option} needs right-padded rows, but a real token follows padding: {fix}")


def pad_id(config) -> int:
    """The padding id of a tokenizer or generation config, or its (first) EOS id where it has none
    (padding is always masked out)."""
    if config.pad_token_id is not None:
        return config.pad_token_id
    eos = config.eos_token_id
    return eos[0] if isinstance(eos, list) else eos
