"""The random Qwen3-MoE of ``gpu_update.py`` as a whole model directory (weights, config, tokenizer), for the
benchmarks that start vLLM on it and decode what it samples."""

import argparse
import itertools
import json
import shutil
import string
from pathlib import Path

TOKENIZER = "data/tiny-qwen3-moe"  # the tiny model's: its chat template and a BPE vocabulary of 2,048 ids
TOKENIZER_FILES = ("tokenizer_config.json", "chat_template.jinja")  # copied as they are


def widened_tokenizer(source: str, target: str, vocab_size: int) -> None:
    """The tokenizer of ``source`` into ``target`` with its BPE vocabulary widened to ``vocab_size`` ids by
    four-letter words that no merge makes: prompts encode to the same ids as with ``source``, and every id a
    model of ``vocab_size`` samples decodes, to a word (a tokenizer decodes an id it lacks to nothing, and
    vLLM's incremental detokenizer may not take one)."""
    spec = json.loads((Path(source) / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    taken = set(vocab) | {token["content"] for token in spec["added_tokens"]}
    first = 1 + max([*vocab.values(), *(token["id"] for token in spec["added_tokens"])])
    words = ("Ġ" + "".join(w) for w in itertools.product(string.ascii_lowercase, repeat=4))  # Ġ: a space
    vocab.update(zip((w for w in words if w not in taken), range(first, vocab_size), strict=False))
    if len(vocab) < vocab_size:
        raise ValueError(f"{vocab_size} ids are more than four-letter words can widen {source}'s tokenizer to")
    (Path(target) / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False))
    for name in TOKENIZER_FILES:
        shutil.copy(Path(source) / name, Path(target) / name)


def random_model_dir(shape: argparse.Namespace, max_positions: int) -> str:
    """``gpu_update``'s random model (``shape``: its parser's arguments; seed 0, bfloat16) with the special
    tokens of ``TOKENIZER``'s tokenizer and ``max_positions`` positions, saved to a new temporary directory
    with the widened tokenizer; returns the directory."""
    import gpu_update
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER)
    config = gpu_update.model_config(shape)
    config.eos_token_id, config.pad_token_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    config.max_position_embeddings = max_positions
    _, model_dir = gpu_update.random_model(shape, config)
    widened_tokenizer(TOKENIZER, model_dir, config.vocab_size)
    return model_dir
