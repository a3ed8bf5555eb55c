"""The kernel options of the policy on a CUDA GPU, under Routing Replay R3: the experts receive exactly the
replayed routes, and each option's log-probs and gradients are as close to the float32 eager model's as
transformers' bfloat16 grouped_mm model is (mean error within 1.5x of its: they round differently, not worse).

    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/mfu/*.whl
    PYTHONPATH=/tmp/site:src python3 -m pytest -m gpu -W default -p no:cacheprovider -rA tests/gpu/test_kernels_gpu.py
"""

import os

import pytest
import torch
from transformers import AutoModelForCausalLM

from stable_rl.kernels import LIGER, compile_decoder_layers, register_liger_experts, use_liger_norms
from stable_rl.policy.logprobs import sequence_logprobs
from stable_rl.routing import RouterHooks, routed_positions

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
os.environ.setdefault("LIGER_FUSED_MOE_AUTOTUNE", "0")  # one config per kernel: the numbers, not the speed

OPTIONS = {
    "liger experts": {"experts": LIGER},
    "liger norms": {"experts": "grouped_mm", "norms": LIGER},
    "compile layers": {"experts": "grouped_mm", "compile": True},
    "compiled head, no padding mask": {"experts": "grouped_mm", "compiled": True, "padding_mask": False},
    "packed rows, flex attention": {"experts": "grouped_mm", "attention": "flex_attention", "packed": True},
    "kept head gradient": {"experts": "grouped_mm", "compiled": True, "keep": True},
}


def batch(vocab: int, layers: int = 4, experts: int = 8, k: int = 2):
    """8 right-padded rows of 40-64 random tokens, every other response token, and rollout routes."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(40, 65, (8,), generator=g)
    input_ids = torch.randint(3, vocab, (8, 64), generator=g)
    attention_mask = torch.arange(64)[None] < lengths[:, None]
    input_ids[~attention_mask] = 0
    response_mask = attention_mask & (torch.arange(64)[None] >= 16)
    routes = torch.rand(8, 64, layers, experts, generator=g).argsort(-1)[..., :k]
    return input_ids.cuda(), attention_mask.cuda(), response_mask.cuda(), routes.cuda()


def replayed(model, ids, attention, response, routes, compiled=False, padding_mask=True, packed=False, keep=False):
    """(log-probs at response tokens, the gradient of their sum, the experts each layer received)."""
    received = []
    for layer in model.model.layers:
        layer.mlp.experts.register_forward_pre_hook(lambda module, args: received.append(args[1]))
    with RouterHooks(model).replay(routes, attention, packed):
        logprobs, _ = sequence_logprobs(
            model,
            ids,
            attention,
            response,
            compiled=compiled,
            padding_mask=padding_mask,
            entropy=False,
            packed=packed,
            keep_head_grad=keep,
        )
    logprobs[response].sum().backward()
    grads = torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])
    return logprobs[response].float(), grads, received


def model_with(path, dtype, experts="grouped_mm", norms=None, compile=False, attention=None):
    if experts == LIGER:
        register_liger_experts()
    kernels = {"experts_implementation": experts} | ({"attn_implementation": attention} if attention else {})
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **kernels).cuda().train()
    if norms == LIGER:
        use_liger_norms(model)
    if compile:
        compile_decoder_layers(model)
    return model


@pytest.mark.parametrize("option", list(OPTIONS))
def test_each_option_replays_the_routes_and_rounds_like_grouped_mm(tiny_model_path, option):
    settings = dict(OPTIONS[option])
    if LIGER in settings.values():
        pytest.importorskip("liger_kernel")
    ids, attention, response, routes = batch(vocab=2048)
    reference = replayed(model_with(tiny_model_path, torch.float32, "eager"), ids, attention, response, routes)
    baseline = replayed(model_with(tiny_model_path, torch.bfloat16), ids, attention, response, routes)
    run = {k: settings.pop(k) for k in ("compiled", "padding_mask", "packed", "keep") if k in settings}
    fast = replayed(model_with(tiny_model_path, torch.bfloat16, **settings), ids, attention, response, routes, **run)

    fed = attention if run.get("packed") else torch.ones_like(attention)  # packed: the real tokens alone
    needed = routed_positions(attention)[fed]
    assert len(fast[2]) == 4
    for layer, indices in enumerate(fast[2]):
        assert torch.equal(indices[needed], routes[fed][needed, layer])
    for i in (0, 1):  # log-probs, gradients
        error, baseline_error = (fast[i] - reference[i]).abs().mean(), (baseline[i] - reference[i]).abs().mean()
        assert baseline_error > 0 and error <= 1.5 * baseline_error, (option, i, error, baseline_error)
