"""Router record/replay on each supported HF MoE family, checked at the experts' own inputs."""

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    GraniteMoeConfig,
    MixtralConfig,
    OlmoeConfig,
    Qwen2MoeConfig,
    Qwen3Config,
    Qwen3MoeConfig,
)

from stable_rl.rollout import RolloutBatch, Sample
from stable_rl.routing import RouterHooks, moe_routers, routed_positions, routes_match

SHAPE = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}
MOE = {"num_experts_per_tok": 2}
# config, and whether its router renormalises the top-k probabilities (written out from each model's code)
FAMILIES = {
    "qwen3_moe": (
        Qwen3MoeConfig(**SHAPE, **MOE, num_experts=4, moe_intermediate_size=16, head_dim=16, norm_topk_prob=True),
        True,
    ),
    "qwen2_moe": (
        Qwen2MoeConfig(
            **SHAPE,
            **MOE,
            num_experts=4,
            moe_intermediate_size=16,
            shared_expert_intermediate_size=16,
            norm_topk_prob=False,
        ),
        False,
    ),
    "mixtral": (MixtralConfig(**SHAPE, **MOE, num_local_experts=4), True),
    "olmoe": (OlmoeConfig(**SHAPE, **MOE, num_experts=4, norm_topk_prob=False), False),
}


def make_model(family: str):
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(FAMILIES[family][0]).float()


def inputs():
    g = torch.Generator().manual_seed(1)
    input_ids = torch.randint(0, 64, (3, 7), generator=g)
    attention_mask = torch.ones(3, 7, dtype=torch.bool)
    attention_mask[2, 5:] = False  # right padding
    return input_ids, attention_mask


def record(model, input_ids, attention_mask):
    hooks = RouterHooks(model)
    with hooks.record(input_ids):
        out = model(input_ids=input_ids, attention_mask=attention_mask).logits
    return hooks.own, out


def experts_inputs(model):
    """What each MoE layer's experts module is actually called with: (expert indices, gate weights)."""
    seen = {}
    _, routers = moe_routers(model)
    blocks = [m for m in model.modules() if any(child is r for r in routers for child in m.children())]
    for layer, block in enumerate(blocks):
        block.experts.register_forward_pre_hook(lambda mod, args, layer=layer: seen.__setitem__(layer, args[1:3]))
    logits = {}
    for layer, router in enumerate(routers):
        router.register_forward_hook(lambda mod, args, out, layer=layer: logits.__setitem__(layer, out[0]))
    return seen, logits


def perturb_routers(model, scale: float = 2.0):
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for router in moe_routers(model)[1]:
            router.weight.add_(torch.randn(router.weight.shape, generator=g) * scale)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_replay_forces_the_recorded_experts_with_the_routers_own_gates(family):
    model = make_model(family)
    input_ids, attention_mask = inputs()
    recorded, _ = record(model, input_ids, attention_mask)
    perturb_routers(model)
    free, _ = record(model, input_ids, attention_mask)
    needed = routed_positions(attention_mask)
    assert not routes_match(free, recorded)[needed].all(), "the perturbation must change some routes"

    seen, router_logits = experts_inputs(model)
    hooks = RouterHooks(model)
    with hooks.replay(recorded, attention_mask):
        model(input_ids=input_ids, attention_mask=attention_mask).logits.sum().backward()
    renormalise = FAMILIES[family][1]
    for layer in range(hooks.num_layers):
        indices, gates = seen[layer]
        want = recorded[:, :, layer].flatten(0, 1)  # [M*L, k]
        have_route = (want >= 0).all(-1)
        assert torch.equal(indices[have_route], want[have_route].long())
        probs = torch.softmax(router_logits[layer].float(), dim=-1).gather(-1, indices)
        if renormalise:
            probs = probs / probs.sum(-1, keepdim=True)
        torch.testing.assert_close(gates.float(), probs, rtol=0, atol=0)
        grad = moe_routers(model)[1][layer].weight.grad
        assert grad is not None and grad.abs().sum() > 0 and torch.isfinite(grad).all()
    # the routers' own choice is reported (for agreement metrics); past layer 0 it sees replayed inputs
    assert torch.equal(hooks.own[:, :, 0], free[:, :, 0])


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_replaying_the_routers_own_choice_changes_nothing(family):
    """Same logits and the same router gradient, bit for bit: replay reproduces the router's gates."""
    input_ids, attention_mask = inputs()
    model = make_model(family)
    recorded, _ = record(model, input_ids, attention_mask)
    plain = model(input_ids=input_ids, attention_mask=attention_mask).logits
    plain.square().sum().backward()
    plain_grads = [r.weight.grad.clone() for r in moe_routers(model)[1]]
    model.zero_grad()
    hooks = RouterHooks(model)
    with hooks.replay(recorded, attention_mask):
        replayed = model(input_ids=input_ids, attention_mask=attention_mask).logits
        replayed.square().sum().backward()
    assert torch.equal(replayed, plain)
    for router, grad in zip(moe_routers(model)[1], plain_grads, strict=True):
        assert torch.equal(router.weight.grad, grad)


def test_the_last_token_and_padding_need_no_route():
    model = make_model("qwen3_moe")
    input_ids, attention_mask = inputs()
    recorded, plain = record(model, input_ids, attention_mask)
    recorded[:, -1] = -1  # last token of rows 0 and 1
    recorded[2, 4:] = -1  # row 2: last real token and padding
    hooks = RouterHooks(model)
    with hooks.replay(recorded, attention_mask):
        out = model(input_ids=input_ids, attention_mask=attention_mask).logits
    torch.testing.assert_close(out, plain, rtol=0, atol=0)


def test_routed_positions_drop_each_rows_last_token():
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert routed_positions(mask).tolist() == [[True, True, False, False], [True, True, True, False]]


def test_routes_match_compares_expert_sets():
    a = torch.tensor([[[0, 1], [2, 3]]])  # [1, 2 tokens, k=2]
    b = torch.tensor([[[1, 0], [2, 1]]])
    assert routes_match(a, b).tolist() == [[True, False]]


@pytest.mark.parametrize(
    ("corrupt", "error", "message"),
    [
        (lambda r: r[:, :-1], ValueError, "expected"),
        (lambda r: r.float(), TypeError, "integer"),
        (lambda r: r.index_put_((torch.tensor(0),), torch.tensor(9)), ValueError, "outside"),
        (lambda r: r.index_put_((torch.tensor(0), torch.tensor(2)), torch.tensor(-1)), ValueError, "row 0, position 2"),
    ],
    ids=["shape", "dtype", "range", "missing"],
)
def test_bad_routes_are_refused_with_the_problem_named(corrupt, error, message):
    model = make_model("qwen3_moe")
    input_ids, attention_mask = inputs()
    recorded, _ = record(model, input_ids, attention_mask)
    with pytest.raises(error, match=message), RouterHooks(model).replay(corrupt(recorded.clone()), attention_mask):
        model(input_ids=input_ids, attention_mask=attention_mask)


def test_a_token_routed_twice_to_one_expert_names_its_layer_row_and_position():
    model = make_model("qwen3_moe")
    input_ids, attention_mask = inputs()
    recorded, _ = record(model, input_ids, attention_mask)
    recorded[1, 3, 1] = torch.tensor([2, 2])
    message = r"1 token-layers name one expert twice .* MoE layer 1, row 1, position 3: experts \[2, 2\].* FlashInfer"
    with pytest.raises(ValueError, match=message), RouterHooks(model).replay(recorded, attention_mask):
        model(input_ids=input_ids, attention_mask=attention_mask)
    recorded[:, -1] = -1  # a duplicate where no route is needed (the last token) is not looked at
    recorded[1, 3, 1] = torch.tensor([2, 3])
    recorded[0, -1, 0] = torch.tensor([1, 1])
    with RouterHooks(model).replay(recorded, attention_mask):
        model(input_ids=input_ids, attention_mask=attention_mask)


def test_an_all_zero_route_table_is_refused_as_routes_never_captured():
    """vLLM's FlashInfer MoE kernels (0.26) return all-zero routed experts: with top-1 routing each token's route is
    valid on its own, so a table of at least 64 token-layers all on expert 0 is refused (a tiny batch may be a
    router's own choice); with top-2 the repeated expert is named first."""
    torch.manual_seed(0)
    config = Qwen3MoeConfig(**SHAPE, num_experts_per_tok=1, num_experts=4, moe_intermediate_size=16, head_dim=16)
    model = AutoModelForCausalLM.from_config(config).float()
    input_ids = torch.randint(0, 64, (6, 8), generator=torch.Generator().manual_seed(1))
    attention_mask = torch.ones(6, 8, dtype=torch.bool)  # 6 x 7 tokens that need a route, x 2 layers = 84
    refused = pytest.raises(ValueError, match=r"every route of the batch is expert 0 .* FlashInfer")
    with refused, RouterHooks(model).replay(torch.zeros(6, 8, 2, 1, dtype=torch.int16), attention_mask):
        model(input_ids=input_ids, attention_mask=attention_mask)
    few_ids, few_mask = inputs()  # 16 tokens x 2 layers = 32 token-layers on expert 0: replayed as given
    with RouterHooks(model).replay(torch.zeros(3, 7, 2, 1, dtype=torch.int16), few_mask):
        model(input_ids=few_ids, attention_mask=few_mask)
    top2 = make_model("qwen3_moe")
    refused = pytest.raises(ValueError, match=r"name one expert twice .* experts \[0, 0\]")
    with refused, RouterHooks(top2).replay(torch.zeros(6, 8, 2, 2, dtype=torch.int16), attention_mask):
        top2(input_ids=input_ids, attention_mask=attention_mask)


def test_the_replayed_routes_are_counted_token_layer_by_token_layer():
    """One forward inside replay(): 2 layers x (6 + 6 + 4 tokens that need a route: every real token but each row's
    last) = 32 token-layers replayed."""
    model = make_model("qwen3_moe")
    input_ids, attention_mask = inputs()
    recorded, _ = record(model, input_ids, attention_mask)
    hooks = RouterHooks(model)
    with hooks.replay(recorded, attention_mask):
        model(input_ids=input_ids, attention_mask=attention_mask)
    assert int(hooks.replayed_routes) == 2 * (6 + 6 + 4)


@pytest.mark.parametrize(("position", "where"), [(6, "its last token"), (5, "padding")])
def test_rollout_routes_off_by_one_against_the_tokens_are_refused(position, where):
    """R3's alignment check: a route at a row's last token or at padding (no engine routes those) means the routes
    are shifted against the tokens."""
    from stable_rl.callbacks.routing_replay import check_alignment

    model = make_model("qwen3_moe")
    input_ids, attention_mask = inputs()
    recorded, _ = record(model, input_ids, attention_mask)
    routes = recorded.clone()
    routes[~routed_positions(attention_mask)] = -1  # what an engine returns
    check_alignment(routes, attention_mask)
    row = 2 if where == "padding" else 0
    routes[row, position] = recorded[row, position]
    with pytest.raises(ValueError, match=rf"row {row} hold a route at position {position}, {where}.* off by one"):
        check_alignment(routes, attention_mask)


def test_routes_left_unused_are_an_error():
    model = make_model("qwen3_moe")
    input_ids, attention_mask = inputs()
    recorded, _ = record(model, input_ids, attention_mask)
    with (
        pytest.raises(RuntimeError, match=r"layers \[0, 1\] were left unused"),
        RouterHooks(model).replay(recorded, attention_mask),
    ):
        pass


def test_dense_and_unsupported_models_are_refused_by_name():
    torch.manual_seed(0)
    dense = AutoModelForCausalLM.from_config(Qwen3Config(**SHAPE, head_dim=16))
    with pytest.raises(
        ValueError, match=r"'qwen3' is a dense model .*supported families: mixtral, olmoe, qwen2_moe, qwen3_moe"
    ):
        RouterHooks(dense)
    granite = AutoModelForCausalLM.from_config(GraniteMoeConfig(**SHAPE, num_local_experts=4, num_experts_per_tok=2))
    with pytest.raises(ValueError, match="'granitemoe' is an unsupported MoE family"):
        RouterHooks(granite)


def test_rollout_batch_pads_routes_with_minus_one():
    routes = [
        torch.tensor([[[0, 1]], [[2, 3]]], dtype=torch.int16).numpy(),
        torch.tensor([[[1, 2]]], dtype=torch.int16).numpy(),
    ]
    samples = [Sample([5, 6], [7], [-0.5], routes=routes[0]), Sample([5], [8], [-0.1], routes=routes[1])]
    batch = RolloutBatch.from_samples(samples, torch.tensor([1.0, 0.0]), 2, 0, temperature=1.0, policy_version=0)
    assert batch.routes.dtype == torch.int16
    assert batch.routes[:, :, 0].tolist() == [[[0, 1], [2, 3], [-1, -1]], [[1, 2], [-1, -1], [-1, -1]]]
    assert batch.rows(slice(1, 2)).routes.shape == (1, 3, 1, 2)
    assert batch.rows(slice(1, 2)).row_index.tolist() == [1]


def test_vllm_routed_experts_become_routes_of_every_token_but_the_last():
    """GPU vLLM's ``routed_experts`` ([computed tokens, layers, k]) are cut or padded to n - 1 positions."""
    import numpy as np

    from stable_rl.rollout.vllm_engine import _routes_of

    routed = np.arange(5 * 2 * 2).reshape(5, 2, 2)  # 5 computed tokens, 2 layers, top-2
    assert _routes_of(routed, 4, [0, 1]).tolist() == routed[:4].tolist()
    padded = _routes_of(routed[:3], 4, [0, 1])
    assert padded.dtype == np.int16 and padded[3].tolist() == [[-1, -1], [-1, -1]]
    with pytest.raises(RuntimeError, match="enable_return_routed_experts"):
        _routes_of(None, 4, [0, 1])


def test_vllm_route_columns_of_dense_layers_are_dropped():
    """vLLM returns one route column per hidden layer, zeros in dense ones (``mlp_only_layers``): routing
    replay keeps the MoE layers' columns, in layer order."""
    import numpy as np

    from stable_rl.rollout.vllm_engine import _routes_of

    routed = np.zeros((3, 4, 2), dtype=np.uint8)  # 3 tokens, 4 hidden layers (1 and 3 dense), top-2
    routed[:, 0], routed[:, 2] = [5, 6], [7, 1]
    assert _routes_of(routed, 3, [0, 2]).tolist() == [[[5, 6], [7, 1]]] * 3
    with pytest.raises(RuntimeError, match=r"routes of 4 layers; the model's MoE layers are \[0, 5\]"):
        _routes_of(routed, 3, [0, 5])


def test_moe_layers_are_found_by_their_routers(tiny_model_path, tmp_path):
    """Qwen3-MoE with ``mlp_only_layers`` [1] and ``decoder_sparse_step`` 1, and Qwen2-MoE with
    ``decoder_sparse_step`` 2: the layer index of every router, read off a meta-device model."""
    from transformers import AutoConfig, Qwen2MoeConfig

    from stable_rl.routing import moe_layers_of

    assert moe_layers_of(tiny_model_path) == [0, 1, 2, 3]
    config = AutoConfig.from_pretrained(tiny_model_path)
    config.mlp_only_layers = [1]
    config.save_pretrained(tmp_path / "qwen3")
    assert moe_layers_of(str(tmp_path / "qwen3")) == [0, 2, 3]
    qwen2 = Qwen2MoeConfig(num_hidden_layers=6, decoder_sparse_step=2, hidden_size=32, num_attention_heads=2)
    qwen2.save_pretrained(tmp_path / "qwen2")
    assert moe_layers_of(str(tmp_path / "qwen2")) == [1, 3, 5]
