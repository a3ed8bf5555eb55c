"""Shared fixtures: the embedded tiny Qwen3-MoE and its tokenizer, offline."""

import os
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

REPO = Path(__file__).resolve().parents[1]
TINY_MOE = REPO / "data" / "tiny-qwen3-moe"


@pytest.fixture(scope="session")
def tiny_model_path() -> str:
    return str(TINY_MOE)


@pytest.fixture
def tiny_model(tiny_model_path):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)


@pytest.fixture(scope="session")
def tokenizer(tiny_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path)
