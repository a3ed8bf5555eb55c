"""Packed sequences (``stable_rl.policy.packing``, ``packed_sequences``): the real tokens of a batch as one row with
restarting positions give the padded batch's log-probs, entropies and gradients, and Routing Replay records
and replays the same routes on them."""

import warnings

import pytest
import torch
from test_kernels import replayed_run
from test_module import fixed_batch
from transformers import AutoModelForCausalLM

from stable_rl import StableRLWarning
from stable_rl.policy.logprobs import sequence_logprobs
from stable_rl.policy.module import HFPolicyModule
from stable_rl.policy.packing import pack, unpack
from stable_rl.policy.runtime import ModelRuntime

pytestmark = [
    pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no `val_dataloader`"),
    pytest.mark.filterwarnings(
        "ignore:model.init_args.runtime.packed_sequences with attn_implementation"
    ),  # SDPA on CPU here
]


def test_pack_keeps_the_real_tokens_row_after_row_with_restarting_positions():
    ids = torch.tensor([[5, 6, 7, 0], [8, 9, 0, 0], [1, 2, 3, 4]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
    packed, positions = pack(ids, mask)
    assert packed.tolist() == [[5, 6, 7, 8, 9, 1, 2, 3, 4]]
    assert positions.tolist() == [[0, 1, 2, 0, 1, 0, 1, 2, 3]]
    values = torch.arange(9.0).requires_grad_()
    back = unpack(values, mask, fill=-1)
    assert back.tolist() == [[0, 1, 2, -1], [3, 4, -1, -1], [5, 6, 7, 8]]
    back.sum().backward()
    assert values.grad.tolist() == [1.0] * 9
    with pytest.raises(ValueError, match=r"packed_sequences=True needs right-padded rows.*turn packed_sequences off"):
        pack(ids, mask.flip(-1))


def test_packed_logprobs_entropies_and_gradients_are_the_padded_batchs(tiny_model_path):
    """float64, so only a real difference fails: a pack without restarting positions, or with attention across
    sequences, changes the log-probs by up to ~4 nats on this batch. The decoder is fed one row of the real
    tokens."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float64, experts_implementation="eager")
    batch = fixed_batch(vocab=2048)
    fed = []
    model.model.embed_tokens.register_forward_pre_hook(lambda module, args: fed.append(tuple(args[0].shape)))
    results = {}
    for packed in (False, True):
        model.zero_grad()
        logprobs, entropy = sequence_logprobs(
            model, batch.input_ids, batch.attention_mask, batch.response_mask, packed=packed
        )
        (logprobs * torch.linspace(-1, 1, logprobs.numel()).view_as(logprobs)).sum().backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        results[packed] = (logprobs.detach(), entropy, grads)
    assert fed == [(8, 8), (1, int(batch.attention_mask.sum()))] and fed[1][1] < 64  # 52 real of 64 positions
    for padded, packed in zip(results[False], results[True], strict=True):
        torch.testing.assert_close(packed, padded, rtol=1e-12, atol=1e-12)
    assert results[False][0].abs().max() > 1 and results[False][2].abs().max() > 1e-3  # nothing vacuous


@pytest.mark.slow  # flex attention compiles its kernel: ~13 s
def test_flex_attention_keeps_packed_sequences_apart(tiny_model_path):
    """transformers' flex attention builds its block mask from the restarting positions (forward only: flex
    attention has no backward on CPU; the GPU tests train with it)."""
    batch = fixed_batch(vocab=2048)
    args = (batch.input_ids, batch.attention_mask, batch.response_mask)
    eager = AutoModelForCausalLM.from_pretrained(tiny_model_path, experts_implementation="eager")
    flex = AutoModelForCausalLM.from_pretrained(
        tiny_model_path, experts_implementation="eager", attn_implementation="flex_attention"
    )
    with torch.no_grad(), warnings.catch_warnings():  # torch 2.13 deprecates what its flex attention and
        warnings.simplefilter("ignore", DeprecationWarning)  # transformers' call of it still do
        padded, _ = sequence_logprobs(eager, *args)
        packed, _ = sequence_logprobs(flex, *args, packed=True)
    torch.testing.assert_close(packed, padded, rtol=0, atol=2e-6)


@pytest.mark.parametrize("replay", ["R2", "R3"])
def test_routing_replay_on_packed_sequences_routes_and_updates_as_padded(tiny_model_path, replay):
    """Two updates (N = 2): every pass on packed rows gives each real token the experts the padded pass gives it
    (R2 records, R3 replays), and the log-probs and weights after agree to float32 rounding."""
    padded = replayed_run(tiny_model_path, replay, experts_implementation="eager")
    packed = replayed_run(tiny_model_path, replay, experts_implementation="eager", packed_sequences=True)
    assert len(packed[1]) == len(padded[1]) > 0
    for (indices, real), (padded_indices, padded_real) in zip(packed[1], padded[1], strict=True):
        assert real.all() and len(real) == int(padded_real.sum()) < len(padded_real)  # only real tokens fed
        assert torch.equal(indices, padded_indices[padded_real])
    for logprobs, padded_logprobs in zip(packed[0], padded[0], strict=True):
        torch.testing.assert_close(logprobs, padded_logprobs, rtol=0, atol=1e-5)
    torch.testing.assert_close(packed[2], padded[2], rtol=0, atol=1e-6)


@pytest.mark.filterwarnings("error:model.init_args.runtime.packed_sequences with attn_implementation")
def test_packing_under_sdpa_or_eager_warns_of_the_whole_packs_attention(tiny_model_path):
    """SDPA (the default) and eager build a [1, 1, T, T] mask over the pack: micro-batch-size times the padded
    batch's [M, 1, L, L] for rows of similar length, and attend over all of it."""
    for attention in (None, "sdpa", "eager"):
        with pytest.warns(StableRLWarning, match="attends over the whole pack"):
            HFPolicyModule(tiny_model_path, runtime=ModelRuntime(packed_sequences=True, attn_implementation=attention))
    for attention in ("flex_attention", "flash_attention_2"):
        HFPolicyModule(tiny_model_path, runtime=ModelRuntime(packed_sequences=True, attn_implementation=attention))
    HFPolicyModule(tiny_model_path)
