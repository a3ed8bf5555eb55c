"""Sparse upcycling of the real SmolLM2-135M-Instruct, cut to its first 4 decoder layers (seconds on CPU)."""

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from stable_rl.policy.upcycle import upcycle
from stable_rl.routing import RouterHooks, moe_layer_indices

PROMPTS = ["What is 2 + 3?", "The capital of France is", "Work out 17 * 23 step by step."]
LAYERS = 4


@pytest.fixture(scope="module")
def dense(smollm2_path):
    model = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32).eval()
    model.model.layers = model.model.layers[:LAYERS]
    model.config.num_hidden_layers = LAYERS
    return model


@pytest.fixture(scope="module")
def batch(smollm2_path):
    return AutoTokenizer.from_pretrained(smollm2_path)(PROMPTS, return_tensors="pt", padding=True)


def moe_of(dense, noise: float):
    return upcycle(dense, num_experts=8, top_k=2, noise=noise, generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def noisy(dense):
    return moe_of(dense, noise=0.01)


@torch.no_grad()
def largest_gap(a, b, batch) -> float:
    mask = batch.attention_mask.bool()
    return (a(**batch).logits - b(**batch).logits)[mask].abs().max().item()


def test_without_noise_the_moe_computes_the_dense_function(dense, batch):
    """Identical experts and gates renormalised to sum 1: the dense logits (|logit| up to 73) up to rounding.
    Mixtral's router computes the gates in float32 even in a float64 model, which is all that is left there."""
    moe = moe_of(dense, noise=0.0)
    assert moe.config.tie_word_embeddings and moe.lm_head.weight is moe.model.embed_tokens.weight
    assert largest_gap(dense, moe, batch) < 1e-4  # measured 3.1e-5
    moe.set_experts_implementation("eager")  # grouped_mm has no float64 kernel
    assert largest_gap(copy.deepcopy(dense).double(), moe.double(), batch) < 1e-5  # measured 7.1e-6


def test_experts_are_the_mlp_plus_noise_of_that_relative_size(dense, noisy):
    mlp, experts = dense.model.layers[2].mlp, noisy.model.layers[2].mlp.experts
    gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])  # [2I, H]
    for copies, weight in ((experts.gate_up_proj, gate_up), (experts.down_proj, mlp.down_proj.weight)):
        assert copies.shape == (8, *weight.shape)
        relative = ((copies - weight).std(dim=(1, 2)) / weight.std()).tolist()
        assert relative == pytest.approx([0.01] * 8, rel=0.01)
    assert not torch.equal(experts.down_proj[0], experts.down_proj[1])


def test_routing_replay_finds_every_router_and_its_routes_change_the_output(noisy, batch):
    moe = noisy
    hooks = RouterHooks(moe)
    assert (hooks.family.model_type, hooks.num_layers, hooks.top_k, hooks.num_experts) == ("mixtral", LAYERS, 2, 8)
    assert moe_layer_indices(moe) == list(range(LAYERS))
    with torch.no_grad(), hooks.record(batch.input_ids):
        own = moe(**batch).logits
    routes = hooks.own  # [B, T, layers, k]
    assert routes.shape == (*batch.input_ids.shape, LAYERS, 2)
    with torch.no_grad():
        with hooks.replay(routes, batch.attention_mask):
            replayed = moe(**batch).logits
        with hooks.replay((routes + 1) % 8, batch.attention_mask):
            others = moe(**batch).logits
    mask = batch.attention_mask.bool()
    assert torch.equal(replayed[mask], own[mask])
    assert (others - own)[mask].abs().max() > 0.1  # experts differ by 1% noise: other routes, other logits


def test_a_model_that_is_not_llama_is_refused(tiny_model):
    with pytest.raises(ValueError, match="upcycle needs a Llama model without biases, got model_type 'qwen3_moe'"):
        upcycle(tiny_model)
