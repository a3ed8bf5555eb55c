"""Simulated low-precision inference: each format's rounding by hand, what is rounded, the FP8 KV cache,
and the engine's settings."""

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from stable_rl.rollout import fp8
from stable_rl.rollout.fp8 import FP8_KV_ATTENTION, quantize_linear_inputs, quantize_weights_, use_fp8_kv_cache
from stable_rl.rollout.hf_engine import HFEngine
from stable_rl.rollout.low_precision import FORMATS, round_e2m1, round_fp4_blocks, round_kv_fp8

per_channel = FORMATS["fp8_per_channel"].weight
REPO = Path(__file__).resolve().parents[2]


def test_fp8_per_channel_rounds_to_e4m3_with_a_per_row_scale():
    # row max 448 -> scale 1: 0.3 = 1.2 x 2^-2 rounds to 1.25 x 2^-2; 0.07 to 1.125 x 2^-4 (3 mantissa bits)
    x = torch.tensor([[1.0, 0.3, -0.07, 448.0], [2.0, 0.0, 0.0, 0.0]])
    expected = torch.tensor([[1.0, 0.3125, -0.0703125, 448.0], [2.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(per_channel(x), expected, rtol=0, atol=0)
    # scale 2 / 448: 2 maps to 448 exactly, 1.3 -> 291.2 -> 288 (step 32 in [256, 512)) -> 1.2857...
    got = per_channel(torch.tensor([[2.0, 1.3]]))
    torch.testing.assert_close(got, torch.tensor([[2.0, 288 * 2 / 448]]))


def test_fp8_per_tensor_has_one_scale_per_weight_per_expert_and_per_activation():
    weight, activation = FORMATS["fp8_per_tensor"].weight, FORMATS["fp8_per_tensor"].activation
    # tensor max 448 -> scale 1 for both rows: 0.35 -> 0.34375 (step 2^-5 in [0.25, 0.5)); 1.3125 is half-way
    # between 1.25 (mantissa 010) and 1.375 (011): to the even one
    x = torch.tensor([[448.0, 1.3125], [0.35, -3.0]])
    torch.testing.assert_close(weight(x), torch.tensor([[448.0, 1.25], [0.34375, -3.0]]), rtol=0, atol=0)
    # per row, row 2 has its own scale 3 / 448: 0.35 -> 52.27 -> 52 (step 4 in [32, 64)) -> 0.3482...
    torch.testing.assert_close(per_channel(x)[1], torch.tensor([52 * 3 / 448, -3.0]))
    # an expert stack [E, out, in]: expert 1 (max 2) keeps its own scale 2 / 448, 1.3 -> 288 -> 1.2857...
    experts = torch.tensor([[[448.0, 1.3]], [[2.0, 1.3]]])
    torch.testing.assert_close(weight(experts), torch.tensor([[[448.0, 1.25]], [[2.0, 288 * 2 / 448]]]))
    # an activation: one scale (1) for all its tokens, so 1.3 -> 1.25 in both
    torch.testing.assert_close(activation(experts), torch.tensor([[[448.0, 1.25]], [[2.0, 1.25]]]), rtol=0, atol=0)


def test_e5m2_keeps_two_mantissa_bits_with_a_per_row_scale():
    e5m2 = FORMATS["e5m2"].weight
    # row max 57344 -> scale 1: 1.4 -> 1.5 (step 0.25 in [1, 2); e4m3 gives 1.375), 0.3 -> 0.3125 (step 2^-4)
    # row 2, scale 2 / 57344: 1.4 -> 40140.8 -> 40960 (step 8192 in [32768, 65536)) -> 1.4285...
    x = torch.tensor([[57344.0, 1.4, 0.3], [2.0, 1.4, 0.0]])
    torch.testing.assert_close(e5m2(x), torch.tensor([[57344.0, 1.5, 0.3125], [2.0, 40960 * 2 / 57344, 0.0]]))
    assert per_channel(torch.tensor([[448.0, 1.4]]))[0, 1] == 1.375


def test_e2m1_rounds_to_nearest_with_ties_to_the_even_mantissa():
    # half-way values go to 0, 1, 2, 4 (mantissa 0), never to 0.5, 1.5, 3, 6; beyond 6 saturates
    x = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, -0.3, 0.6, 2.2, 5.8])
    expected = torch.tensor([0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, -0.5, 0.5, 2.0, 6.0])
    torch.testing.assert_close(round_e2m1(x), expected, rtol=0, atol=0)


def test_fp4_scales_each_block_of_16_by_its_absmax_over_6():
    # block 1: absmax 3 -> scale 0.5, x / 0.5 = 6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, -0.4, -2.2, 0, 0.6, ...
    block1 = [3.0, 0.125, 0.375, 0.625, 0.875, 1.25, 1.75, 2.5, -0.2, -1.1, 0.0, 0.3, 2.9, -2.2, 0.05, 1.0]
    rounded1 = [3.0, 0.0, 0.5, 0.5, 1.0, 1.0, 2.0, 2.0, -0.25, -1.0, 0.0, 0.25, 3.0, -2.0, 0.0, 1.0]
    # block 2 (the last 4 of 20): absmax 12 -> scale 2: 5 / 2 = 2.5 -> 2 (tie, even) -> 4, 7 / 2 = 3.5 -> 4 -> 8
    x = torch.tensor([[*block1, 12.0, 5.0, 7.0, -1.0]])
    expected = torch.tensor([[*rounded1, 12.0, 4.0, 8.0, -1.0]])
    torch.testing.assert_close(round_fp4_blocks(x), expected, rtol=0, atol=0)
    assert FORMATS["fp4"].weight is FORMATS["fp4"].activation is round_fp4_blocks


@pytest.mark.parametrize("quantization", list(FORMATS))
def test_weights_are_rounded_but_embeddings_head_and_routers_kept(tiny_model_path, quantization):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    before = {name: p.clone() for name, p in model.named_parameters()}
    assert quantize_weights_(model, quantization) == 24  # 30 matrices - embeddings, head, 4 routers
    for name, parameter in model.named_parameters():
        kept = name in ("model.embed_tokens.weight", "lm_head.weight") or name.endswith("mlp.gate.weight")
        if kept or parameter.ndim < 2:
            assert torch.equal(parameter, before[name]), name
        else:
            rounded = FORMATS[quantization].weight(before[name])
            assert not torch.equal(parameter, before[name]), name
            torch.testing.assert_close(parameter, rounded, rtol=0, atol=0)


def test_routers_are_rounded_only_with_quantize_router(tiny_model_path):
    def router_input_and_weight(router: bool):
        model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
        count = quantize_weights_(model, "fp8_per_channel", router=router)
        quantize_linear_inputs(model, "fp8_per_channel", router=router)
        seen = []
        gate = model.model.layers[1].mlp.gate
        gate.register_forward_pre_hook(lambda mod, args: seen.append(args[0].clone()))  # after the rounding
        model(input_ids=torch.tensor([[5, 6, 7]]))
        return count, seen[0], gate.weight

    original = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).model.layers[1].mlp.gate
    count, seen, weight = router_input_and_weight(router=False)
    assert count == 24 and torch.equal(weight, original.weight)
    assert not torch.equal(seen, per_channel(seen))  # the router reads the unrounded hidden states
    count, seen, weight = router_input_and_weight(router=True)
    assert count == 28 and torch.equal(weight, per_channel(original.weight))
    torch.testing.assert_close(seen, per_channel(seen), rtol=0, atol=0)  # already on the e4m3 grid


def test_linear_inputs_are_rounded_per_token(tiny_model_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    seen = []
    q_proj = model.model.layers[0].self_attn.q_proj
    quantize_linear_inputs(model)
    q_proj.register_forward_pre_hook(lambda mod, args: seen.append(args[0].clone()))  # runs after the rounding
    model(input_ids=torch.tensor([[5, 6, 7]]))
    torch.testing.assert_close(seen[0], per_channel(seen[0]), rtol=0, atol=0)  # already on the e4m3 grid


@pytest.mark.parametrize("quantization", list(FORMATS))
def test_moe_experts_inputs_are_rounded_too(tiny_model_path, quantization):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    seen = []
    experts = model.model.layers[0].mlp.experts
    quantize_linear_inputs(model, quantization)
    experts.register_forward_pre_hook(lambda mod, args: seen.append(args[0].clone()))
    model(input_ids=torch.tensor([[5, 6, 7]]))
    round_input = FORMATS[quantization].activation
    torch.testing.assert_close(seen[0], round_input(seen[0]), rtol=0, atol=0)


def test_fp8_kv_rounding_has_scale_1_saturates_and_is_idempotent():
    x = torch.tensor([0.3, 500.0, -1000.0, 1e-4, 0.07])  # below e4m3's smallest step 2^-9 -> 0
    torch.testing.assert_close(round_kv_fp8(x), torch.tensor([0.3125, 448.0, -448.0, 0.0, 0.0703125]), rtol=0, atol=0)
    keys = torch.randn(2, 2, 9, 32, generator=torch.Generator().manual_seed(0)).mul(30).bfloat16()
    once = round_kv_fp8(keys)
    assert not torch.equal(once, keys) and torch.equal(round_kv_fp8(once), once)  # a cache rounded again: the same


def test_attention_reads_fp8_keys_and_values(tiny_model_path, monkeypatch):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    input_ids = torch.tensor([[5, 6, 7, 8]])
    exact = model(input_ids=input_ids).logits
    seen = []

    def spy(module, query, key, value, *args, **kwargs):
        seen.append((key, value))
        return sdpa(module, query, key, value, *args, **kwargs)

    sdpa = fp8.sdpa_attention_forward
    monkeypatch.setattr(fp8, "sdpa_attention_forward", spy)
    use_fp8_kv_cache(model)
    rounded = model(input_ids=input_ids).logits
    assert model.config._attn_implementation == FP8_KV_ATTENTION and len(seen) == 4  # once per layer
    for key, value in seen:  # [B, kv_heads, T, head_dim]
        assert key.shape == (1, 2, 4, 32)
        assert torch.equal(key, round_kv_fp8(key)) and torch.equal(value, round_kv_fp8(value))
    assert not torch.allclose(rounded, exact, atol=1e-4)


def test_engine_rounds_its_rung_again_after_every_sync(tiny_model_path, tokenizer):
    engine = HFEngine(max_new_tokens=4, seed=0, quantization="fp4", quantize_router=True, kv_cache_dtype="fp8")
    engine.start(tiny_model_path, max_model_len=64)
    assert engine.model.config._attn_implementation == FP8_KV_ATTENTION
    policy = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).state_dict()
    moved = {name: tensor + 0.01 for name, tensor in policy.items()}
    engine.load_weights(moved.items())
    own = engine.model.state_dict()
    for name in ("model.layers.0.mlp.gate.weight", "model.layers.0.mlp.experts.down_proj"):
        torch.testing.assert_close(own[name], round_fp4_blocks(moved[name]), rtol=0, atol=0)
    samples = engine.generate([tokenizer.encode("1 + 2 =")], group_size=2, step=0)
    assert len(samples) == 2 and all(len(s.logprobs) == len(s.response_ids) for s in samples)


def test_fp8_is_the_alias_of_fp8_per_channel():
    assert HFEngine(fp8=True).quantization == "fp8_per_channel"
    assert HFEngine(fp8=True, quantization="fp8_per_channel").quantization == "fp8_per_channel"
    assert HFEngine().quantization is None and HFEngine().kv_cache_dtype == "auto"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"fp8": True, "quantization": "e5m2"}, r"fp8: true is the alias .* set data.engine.init_args.fp8: false"),
        ({"quantization": "int8"}, r"quantization: 'int8' .* fp8_per_channel, fp8_per_tensor, e5m2, fp4, or null"),
        ({"quantization": "fp8"}, r"quantization: 'fp8' .*vLLM reads 'fp8' as fp8_per_tensor"),
        ({"kv_cache_dtype": "fp8_e5m2"}, r"data.engine.init_args.kv_cache_dtype: 'fp8_e5m2' .* auto .* fp8"),
        ({"quantize_router": True}, r"quantize_router: true .* set data.engine.init_args.quantization"),
    ],
    ids=["fp8-and-quantization", "unknown", "vllm-fp8", "kv-cache-dtype", "router-alone"],
)
def test_unknown_or_conflicting_settings_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        HFEngine(**settings)


@pytest.mark.parametrize(
    ("overlay", "rung"),
    [
        ("fp8_per_tensor", ("fp8_per_tensor", False, "auto")),
        ("e5m2", ("e5m2", False, "auto")),
        ("fp4", ("fp4", False, "auto")),
        ("fp8_router", ("fp8_per_channel", True, "auto")),
        ("fp8_kv", ("fp8_per_channel", False, "fp8")),
    ],
)
def test_each_mismatch_recipe_sets_its_rung(overlay, rung, monkeypatch):
    from stable_rl.cli import main

    monkeypatch.chdir(REPO)
    monkeypatch.setattr("sys.argv", ["stable-rl"])
    stack = ["recipes/minirl.yaml", "recipes/paper/fp8.yaml", f"recipes/paper/mismatch/{overlay}.yaml"]
    engine = main([f"--config={config}" for config in stack], run=False).datamodule.engine
    assert (engine.quantization, engine.quantize_router, engine.kv_cache_dtype) == rung
    assert isinstance(engine, HFEngine) and engine.dtype == "bfloat16"
