"""Simulated FP8 (e4m3) inference: rounding by hand, what is rounded, and the engine's use of it."""

import torch
from transformers import AutoModelForCausalLM

from stable_rl.rollout.fp8 import fake_quantize, quantize_linear_inputs, quantize_weights_


def test_fake_quantize_rounds_to_e4m3_with_a_per_row_scale():
    # row max 448 -> scale 1: 0.3 = 1.2 x 2^-2 rounds to 1.25 x 2^-2; 0.07 to 1.125 x 2^-4 (3 mantissa bits)
    x = torch.tensor([[1.0, 0.3, -0.07, 448.0], [2.0, 0.0, 0.0, 0.0]])
    expected = torch.tensor([[1.0, 0.3125, -0.0703125, 448.0], [2.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(fake_quantize(x), expected, rtol=0, atol=0)
    # scale 2 / 448: 2 maps to 448 exactly, 1.3 -> 291.2 -> 288 (step 32 in [256, 512)) -> 1.2857...
    got = fake_quantize(torch.tensor([[2.0, 1.3]]))
    torch.testing.assert_close(got, torch.tensor([[2.0, 288 * 2 / 448]]))


def test_weights_are_rounded_but_embeddings_head_and_routers_kept(tiny_model_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    before = {name: p.clone() for name, p in model.named_parameters()}
    assert quantize_weights_(model) == 24  # 30 matrices - embeddings, head, 4 routers
    for name, parameter in model.named_parameters():
        kept = name in ("model.embed_tokens.weight", "lm_head.weight") or name.endswith("mlp.gate.weight")
        if kept or parameter.ndim < 2:
            assert torch.equal(parameter, before[name]), name
        else:
            assert not torch.equal(parameter, before[name]), name
            torch.testing.assert_close(parameter, fake_quantize(before[name]), rtol=0, atol=0)


def test_linear_inputs_are_rounded_per_token(tiny_model_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    seen = []
    q_proj = model.model.layers[0].self_attn.q_proj
    quantize_linear_inputs(model)
    q_proj.register_forward_pre_hook(lambda mod, args: seen.append(args[0].clone()))  # runs after the rounding
    model(input_ids=torch.tensor([[5, 6, 7]]))
    torch.testing.assert_close(seen[0], fake_quantize(seen[0]), rtol=0, atol=0)  # already on the e4m3 grid


def test_moe_experts_inputs_are_rounded_too(tiny_model_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    seen = []
    experts = model.model.layers[0].mlp.experts
    quantize_linear_inputs(model)
    experts.register_forward_pre_hook(lambda mod, args: seen.append(args[0].clone()))
    model(input_ids=torch.tensor([[5, 6, 7]]))
    torch.testing.assert_close(seen[0], fake_quantize(seen[0]), rtol=0, atol=0)
