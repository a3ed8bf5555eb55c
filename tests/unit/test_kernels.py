"""The kernel options of the policy (``stable_rl.kernels``, ``compile_logprobs``, ``padding_mask``): Routing
Replay R2/R3 gives the same routes and updates with each option on as with the eager model.

Liger's Triton kernels run on CUDA only; here a stand-in ``liger_kernel`` computes transformers' own eager
experts and RMSNorm, so that what is checked is the wiring: the kernel receives the routers' (replayed)
experts and gates, and the fused norms train the model's own weights. Their numbers are checked on a GPU
(``tests/gpu/test_kernels_gpu.py``).
"""

import sys
from types import ModuleType, SimpleNamespace
from typing import ClassVar

import pytest
import torch
from test_module import fixed_batch, train_on
from test_routing_replay import HandedRoutesR3, Spy
from torch._dynamo.utils import counters
from transformers import AutoModelForCausalLM
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeExperts, Qwen3MoeRMSNorm

from stable_rl.callbacks import RoutingReplay
from stable_rl.kernels import compile_decoder_layers, use_liger_norms
from stable_rl.policy.logprobs import sequence_logprobs
from stable_rl.policy.runtime import ModelRuntime
from stable_rl.rl import PolicyModule
from stable_rl.routing import routed_positions

pytestmark = pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no `val_dataloader`")


def routed_batch():
    """The fixed batch of ``test_module`` with rollout routes (4 MoE layers, 2 distinct of 8 experts)."""
    batch = fixed_batch(vocab=2048)
    scores = torch.rand(*batch.input_ids.shape, 4, 8, generator=torch.Generator().manual_seed(1))
    batch.routes = scores.argsort(-1)[..., :2].to(torch.int16)
    batch.routes[~routed_positions(batch.attention_mask)] = -1  # as an engine returns them: none where none is needed
    return batch


def experts_calls(model):
    """(experts, real) of every call of every MoE layer's experts module, in order: the experts it is
    called with, [tokens, k], and which tokens are real (the fixed batch pads with id 0, real ids are >= 3)."""
    calls, real = [], []
    model.model.embed_tokens.register_forward_pre_hook(lambda module, args: real.append(args[0].flatten() != 0))
    for layer in model.model.layers:
        layer.mlp.experts.register_forward_pre_hook(lambda module, args: calls.append((args[1], real[-1])))
    return calls


def replayed_run(tiny_model_path, replay: str, dtype: str = "float32", **runtime):
    """Two SGD updates (N = 2) with ``replay`` and the ``runtime`` switches: (every update's log-probs,
    ``experts_calls``, the weights after)."""
    torch.manual_seed(0)
    spy = Spy()
    module = PolicyModule(
        tiny_model_path,
        objective=spy,
        optimizer=lambda p: torch.optim.SGD(p, lr=20.0),
        dtype=dtype,
        runtime=ModelRuntime(**runtime),
    )

    class Watched(HandedRoutesR3 if replay == "R3" else RoutingReplay):
        def on_fit_start(self, trainer, pl_module):
            super().on_fit_start(trainer, pl_module)
            self.calls = experts_calls(pl_module.policy)

    callback = Watched() if replay == "R3" else Watched("R2")
    train_on(routed_batch(), module, steps=2, callbacks=[callback], mini_batch_size=4)
    weights = torch.cat([p.detach().flatten() for p in module.policy.parameters()])
    return spy.logprobs, callback.calls, weights


def test_the_head_is_compiled_by_default_on_gpus_only(tiny_model_path, monkeypatch):
    """``compile_logprobs`` None compiles the head's arithmetic where the tokens are on a GPU (checked by
    the tensors' device when the log-probs are taken), not on CPU; True or False decide everywhere."""
    asked = []
    monkeypatch.setattr(
        "stable_rl.policy.module.sequence_logprobs",
        lambda *args, compiled, **kwargs: asked.append(compiled) or (torch.zeros(1), None),
    )
    batch = fixed_batch(vocab=2048)
    args = (batch.input_ids, batch.attention_mask, batch.response_mask)
    for setting in (None, True, False):
        PolicyModule(tiny_model_path, runtime=ModelRuntime(compile_logprobs=setting))(*args)
    cuda_ids = SimpleNamespace(is_cuda=True)  # what the check reads of a GPU batch
    PolicyModule(tiny_model_path)(cuda_ids, batch.attention_mask, batch.response_mask)
    assert asked == [False, True, False, True]


# Dynamo's tracer reads ``.grad`` of non-leaf inputs (torch/_dynamo/variables/builder.py, safe_has_grad) and
# its own warning filter does not hide the C++ warning from pytest's filterwarnings=error
@pytest.mark.slow  # torch.compile of the layers and head: about a minute on 2 cores
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf Tensor:UserWarning")
@pytest.mark.parametrize("replay", ["R2", "R3"])
def test_compiled_layers_and_head_without_padding_mask_replay_the_same_routes(tiny_model_path, replay):
    """Compiled attention and norms, the compiled head and the causal mask alone: every pass routes the
    real tokens (R2: records, R3: replays) to the experts the eager model does, and the updates agree to
    float32 rounding (padding tokens see other tokens without the padding mask: nothing reads them)."""
    eager = replayed_run(tiny_model_path, replay, experts_implementation="eager")
    torch._dynamo.reset()
    counters.clear()
    fast = replayed_run(tiny_model_path, replay, compile_layers=True, compile_logprobs=True, padding_mask=False)
    assert counters["stats"]["unique_graphs"] > 0 and not counters["graph_break"]  # compiled, and whole
    assert len(fast[1]) == len(eager[1]) > 0
    for (indices, real), (eager_indices, eager_real) in zip(fast[1], eager[1], strict=True):
        assert torch.equal(real, eager_real) and torch.equal(indices[real], eager_indices[real])
    for logprobs, eager_logprobs in zip(fast[0], eager[0], strict=True):
        torch.testing.assert_close(logprobs, eager_logprobs, rtol=0, atol=1e-5)
    assert (
        eager[2] - torch.cat([p.flatten() for p in AutoModelForCausalLM.from_pretrained(tiny_model_path).parameters()])
    ).abs().max() > 1e-3
    torch.testing.assert_close(fast[2], eager[2], rtol=0, atol=1e-6)


@pytest.mark.parametrize("compiled", [False, True])
def test_a_kept_head_gradient_makes_the_recomputing_heads_updates(tiny_model_path, compiled):
    """``keep_head_grad``: the module's two updates (N = 2, R3) take the same log-probs and end at the same
    weights as the head that recomputes its logits in the backward (float32 rounding)."""
    recomputed = replayed_run(tiny_model_path, "R3", compile_logprobs=compiled)
    kept = replayed_run(tiny_model_path, "R3", compile_logprobs=compiled, keep_head_grad=True)
    for logprobs, reference in zip(kept[0], recomputed[0], strict=True):
        torch.testing.assert_close(logprobs, reference, rtol=0, atol=1e-6)
    torch.testing.assert_close(kept[2], recomputed[2], rtol=0, atol=1e-6)


def test_compile_leaves_the_routers_eager(tiny_model_path):
    """Attention and both norms of every layer are compiled; routers never; experts only in bfloat16
    with grouped_mm (float32 grouped_mm falls back to a per-expert loop)."""
    for dtype, experts in ((torch.float32, False), (torch.bfloat16, True)):
        model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=dtype, experts_implementation="grouped_mm")
        names = {id(m): n for n, m in model.named_modules()}
        compiled = {names[id(m)] for m in compile_decoder_layers(model)}
        parts = ["self_attn", "input_layernorm", "post_attention_layernorm"] + ["mlp.experts"] * experts
        assert compiled == {f"model.layers.{i}.{part}" for i in range(4) for part in parts}
        assert all(
            getattr(m, "_compiled_call_impl", None) is None for n, m in model.named_modules() if n.endswith("gate")
        )


def test_without_padding_mask_the_logprobs_are_the_masked_models(tiny_model_path):
    """Right-padded rows under the causal mask alone: the same log-probs and entropies (float64, so only
    a real difference fails); a row with padding before a real token is refused."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float64, experts_implementation="eager")
    batch = fixed_batch(vocab=2048)
    assert not batch.attention_mask.all()  # rows of different lengths: there is padding
    args = (model, batch.input_ids, batch.attention_mask, batch.response_mask)
    with torch.no_grad():
        masked, unmasked = sequence_logprobs(*args), sequence_logprobs(*args, padding_mask=False)
    for a, b in zip(masked, unmasked, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-12)
    left_padded = batch.attention_mask.flip(-1)
    with pytest.raises(ValueError, match="needs right-padded rows"):
        sequence_logprobs(model, batch.input_ids, left_padded, batch.response_mask, padding_mask=False)


class StandInMoE:
    """``LigerFusedMoEFunction`` computing transformers' eager experts; keeps the indices it was given."""

    calls: ClassVar[list[torch.Tensor]] = []

    @classmethod
    def apply(cls, hidden, gate_up_proj, down_proj, top_k_index, top_k_weights):
        assert top_k_index.dtype == torch.int32  # as Liger's kernel takes them
        cls.calls.append(top_k_index.clone())
        experts = SimpleNamespace(
            num_experts=gate_up_proj.shape[0], gate_up_proj=gate_up_proj, down_proj=down_proj, act_fn=torch.nn.SiLU()
        )
        return Qwen3MoeExperts.forward.__wrapped__(experts, hidden, top_k_index.long(), top_k_weights)


class StandInRMSNorm(Qwen3MoeRMSNorm):
    """``LigerRMSNorm`` computing transformers' Qwen3-MoE RMSNorm."""

    def __init__(self, hidden_size, eps, casting_mode, in_place):
        assert (casting_mode, in_place) == ("llama", False)
        super().__init__(hidden_size, eps)


@pytest.fixture
def stand_in_liger(monkeypatch):
    modules = {name: ModuleType(name) for name in ("liger_kernel", "liger_kernel.ops", "liger_kernel.transformers")}
    modules["liger_kernel.ops.fused_moe"] = SimpleNamespace(LigerFusedMoEFunction=StandInMoE)
    modules["liger_kernel.transformers.rms_norm"] = SimpleNamespace(LigerRMSNorm=StandInRMSNorm)
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    StandInMoE.calls = []
    return StandInMoE


@pytest.mark.parametrize("replay", ["R2", "R3"])
def test_liger_experts_and_norms_get_the_replayed_routes_and_train_the_same_weights(
    tiny_model_path, stand_in_liger, replay
):
    """bfloat16 (Liger's experts refuse float32): with the stand-in kernels the run is the eager run, bit
    for bit, and the kernel received exactly the experts the routers chose or replayed."""
    eager = replayed_run(tiny_model_path, replay, dtype="bfloat16", experts_implementation="eager")
    liger = replayed_run(tiny_model_path, replay, dtype="bfloat16", experts_implementation="liger", kernels="liger")
    assert len(stand_in_liger.calls) == len(liger[1]) > 0
    for given, (indices, _) in zip(stand_in_liger.calls, liger[1], strict=True):
        assert torch.equal(given.long(), indices)
    for (indices, _), (eager_indices, _) in zip(liger[1], eager[1], strict=True):
        assert torch.equal(indices, eager_indices)
    for logprobs, eager_logprobs in zip(liger[0], eager[0], strict=True):
        assert torch.equal(logprobs, eager_logprobs)
    assert torch.equal(liger[2], eager[2])


def test_liger_norms_share_the_weights_and_names(tiny_model_path, stand_in_liger):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    before = dict(model.named_parameters())
    assert use_liger_norms(model) == 4 * 4 + 1  # per layer: input, post-attention, q and k norms; the final norm
    assert all(type(m) is StandInRMSNorm for n, m in model.named_modules() if n.endswith("norm"))
    assert {n: id(p) for n, p in model.named_parameters()} == {n: id(p) for n, p in before.items()}


def test_liger_refuses_what_it_would_compute_differently(tiny_model_path, stand_in_liger):
    module = PolicyModule(
        tiny_model_path, runtime=ModelRuntime(experts_implementation="liger")
    )  # float32 weights: TF32 in Triton
    module.configure_model()
    with pytest.raises(ValueError, match="TF32"):
        module.batch_logprobs(fixed_batch(vocab=2048))
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    model.model.norm = type("GemmaRMSNorm", (Qwen3MoeRMSNorm,), {})(128)
    with pytest.raises(ValueError, match="GemmaRMSNorm may not normalise"):
        use_liger_norms(model)
