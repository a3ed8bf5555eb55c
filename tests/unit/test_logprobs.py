"""Chunked log-probs/entropy against the full float32 log-softmax, values and gradients."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from stable_rl.policy.logprobs import _chunk_logits_grad_, _logits_grad, sequence_logprobs, token_logprobs_and_entropy


@pytest.mark.parametrize("keep_grad", [False, True])
@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("chunk_size", [1, 3, 64])
def test_chunked_matches_full_log_softmax(chunk_size, compiled, keep_grad):
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(10, 8, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(17, 8, generator=g, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 17, (10,), generator=g)
    coeffs = torch.randn(10, generator=g, dtype=torch.float64)

    logprobs, entropy = token_logprobs_and_entropy(
        hidden, weight, targets, temperature=0.7, chunk_size=chunk_size, compiled=compiled, keep_grad=keep_grad
    )
    (logprobs * coeffs).sum().backward()
    grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None

    full = (hidden @ weight.T / 0.7).log_softmax(-1)  # [10, 17]
    ref = full.gather(-1, targets[:, None])[:, 0]
    (ref * coeffs).sum().backward()
    torch.testing.assert_close(logprobs.detach(), ref.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(entropy, -(full.exp() * full).sum(-1).detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grads[0], hidden.grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grads[1], weight.grad, rtol=1e-12, atol=1e-12)
    assert not entropy.requires_grad


def test_sequence_logprobs_are_position_aligned(tiny_model):
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(3, tiny_model.config.vocab_size, (3, 9), generator=g)
    attention_mask = torch.ones(3, 9, dtype=torch.bool)
    attention_mask[2, 7:] = False  # right padding
    response_mask = torch.zeros(3, 9, dtype=torch.bool)
    response_mask[0, 4:] = True
    response_mask[1, 2:6] = True
    response_mask[2, 5:7] = True
    with torch.no_grad():
        logprobs, entropy = sequence_logprobs(tiny_model, input_ids, attention_mask, response_mask, chunk_size=4)
        full = tiny_model(input_ids=input_ids, attention_mask=attention_mask).logits.float().log_softmax(-1)
    expected = torch.zeros(3, 9)
    expected[:, 1:] = full[:, :-1].gather(-1, input_ids[:, 1:, None])[..., 0]
    expected_entropy = torch.zeros(3, 9)
    expected_entropy[:, 1:] = -(full.exp() * full).sum(-1)[:, :-1]
    torch.testing.assert_close(logprobs, expected * response_mask, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropy, expected_entropy * response_mask, rtol=1e-5, atol=1e-5)


def test_sequence_logprobs_gradient_matches_full_model_autograd(tiny_model_path):
    """The chunked, checkpointed head gives the same parameter gradients as log_softmax of the full logits
    (in float64, so that only a real difference, not summation order, can fail the comparison)."""
    tiny_model = AutoModelForCausalLM.from_pretrained(
        tiny_model_path,
        dtype=torch.float64,
        experts_implementation="eager",  # grouped_mm has no float64
    )
    g = torch.Generator().manual_seed(1)
    input_ids = torch.randint(3, tiny_model.config.vocab_size, (2, 8), generator=g)
    attention_mask = torch.ones(2, 8, dtype=torch.bool)
    response_mask = torch.zeros(2, 8, dtype=torch.bool)
    response_mask[:, 3:] = True
    coeffs = torch.randn(2, 8, generator=g, dtype=torch.float64)

    logprobs, _ = sequence_logprobs(tiny_model, input_ids, attention_mask, response_mask, temperature=0.8, chunk_size=3)
    (logprobs * coeffs).sum().backward()
    chunked = {n: p.grad.clone() for n, p in tiny_model.named_parameters() if p.grad is not None}
    tiny_model.zero_grad()

    full = (tiny_model(input_ids=input_ids, attention_mask=attention_mask).logits / 0.8).log_softmax(-1)
    reference = torch.zeros(2, 8, dtype=torch.float64)
    reference[:, 1:] = full[:, :-1].gather(-1, input_ids[:, 1:, None])[..., 0]
    (reference * response_mask * coeffs).sum().backward()
    assert chunked.keys() == {n for n, p in tiny_model.named_parameters() if p.grad is not None}
    for name, param in tiny_model.named_parameters():
        if param.grad is not None:
            torch.testing.assert_close(chunked[name], param.grad, rtol=1e-10, atol=1e-12, msg=name)


def test_a_kept_head_gradient_is_kept_only_where_a_backward_will_use_it():
    """keep_grad keeps one [chunk, vocab] unit gradient per chunk beside the four tensors of the recompute; a
    pass without gradients (pi_old, under no_grad) keeps none."""
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(7, 5, generator=g, requires_grad=True)
    weight = torch.randn(11, 5, generator=g, requires_grad=True)
    targets = torch.randint(0, 11, (7,), generator=g)
    for keep, grad, saved in ((False, True, [(7, 5), (11, 5), (7,), (7,)]), (True, True, None), (True, False, [])):
        shapes = []
        with (
            torch.set_grad_enabled(grad),
            torch.autograd.graph.saved_tensors_hooks(
                lambda t, seen=shapes: seen.append(tuple(t.shape)) or t, lambda t: t
            ),
        ):
            token_logprobs_and_entropy(hidden, weight, targets, chunk_size=3, keep_grad=keep)
        expected = saved if saved is not None else [(7, 5), (11, 5), (7,), (7,), (3, 11), (3, 11), (1, 11)]
        assert shapes == expected, (keep, grad)


def test_entropy_false_returns_the_same_logprobs_and_no_entropy():
    g = torch.Generator().manual_seed(0)
    hidden, weight = torch.randn(7, 5, generator=g), torch.randn(11, 5, generator=g)
    targets = torch.randint(0, 11, (7,), generator=g)
    with_entropy, _ = token_logprobs_and_entropy(hidden, weight, targets, chunk_size=3)
    logprobs, entropy = token_logprobs_and_entropy(hidden, weight, targets, chunk_size=3, entropy=False)
    assert entropy is None
    assert torch.equal(logprobs, with_entropy)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_bfloat16_head_gives_float32_logprobs_on_cuda():
    """A bfloat16 head on CUDA multiplies into float32 logits: log-probs equal float64 of the same
    (bfloat16) operands up to float32 summation, not bfloat16 rounding (~0.05 nats at logits of 10-20);
    gradients, which come back in bfloat16, to bfloat16 precision."""
    g = torch.Generator(device="cuda").manual_seed(0)
    hidden = torch.randn(300, 256, device="cuda", generator=g).bfloat16().requires_grad_(True)
    weight = (torch.randn(5000, 256, device="cuda", generator=g) * 0.3).bfloat16().requires_grad_(True)
    targets = torch.randint(0, 5000, (300,), device="cuda", generator=g)
    coeffs = torch.randn(300, device="cuda", generator=g)
    logprobs, entropy = token_logprobs_and_entropy(hidden, weight, targets, temperature=0.7, chunk_size=16)
    (logprobs * coeffs).sum().backward()  # 19 chunks: the head's gradient is summed in float32

    h, w = hidden.detach().double().requires_grad_(True), weight.detach().double().requires_grad_(True)
    full = (h @ w.T / 0.7).log_softmax(-1)
    ref = full.gather(-1, targets[:, None])[:, 0]
    (ref * coeffs.double()).sum().backward()
    logits = h.detach() @ w.detach().T / 0.7
    assert logprobs.dtype == torch.float32 and logits.abs().max() > 16  # bfloat16 steps by 0.125 there
    torch.testing.assert_close(logprobs.double(), ref.detach(), rtol=0, atol=1e-4)
    torch.testing.assert_close(entropy.double(), -(full.exp() * full).sum(-1).detach(), rtol=0, atol=1e-4)
    for grad, expected in ((hidden.grad, h.grad), (weight.grad, w.grad)):
        assert grad.dtype == torch.bfloat16
        torch.testing.assert_close(grad.double(), expected, rtol=2**-7, atol=2**-7 * expected.abs().max().item())


def test_autocast_leaves_the_head_in_float32_forward_and_backward():
    """Under bf16 autocast (Lightning's bf16-mixed) the chunked head still computes float32 logits and
    its hand-written backward runs (it recomputes the logits outside autocast)."""
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(10, 8, generator=g, requires_grad=True)
    weight = torch.randn(17, 8, generator=g, requires_grad=True)
    targets = torch.randint(0, 17, (10,), generator=g)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logprobs, _ = token_logprobs_and_entropy(hidden, weight, targets, chunk_size=3)
    logprobs.sum().backward()
    reference = (hidden @ weight.T).log_softmax(-1).gather(-1, targets[:, None])[:, 0]
    assert logprobs.dtype == torch.float32
    torch.testing.assert_close(logprobs, reference, rtol=1e-6, atol=1e-6)
    grad = hidden.grad.clone()
    hidden.grad = None
    reference.sum().backward()
    torch.testing.assert_close(grad, hidden.grad, rtol=1e-6, atol=1e-6)


def test_no_tokens_give_empty_logprobs_and_zero_gradients():
    hidden = torch.zeros(0, 8, requires_grad=True)
    weight = torch.randn(17, 8, requires_grad=True)
    logprobs, entropy = token_logprobs_and_entropy(hidden, weight, torch.zeros(0, dtype=torch.long))
    logprobs.sum().backward()
    assert logprobs.shape == entropy.shape == (0,)
    assert torch.equal(weight.grad, torch.zeros_like(weight))


def test_the_compiled_softmax_gradient_is_made_once_per_process():
    """The forward (kept gradient) and the backward share one compiled function: another would compile again."""
    assert _logits_grad(True) is _logits_grad(True)
    assert _logits_grad(False) is _chunk_logits_grad_
