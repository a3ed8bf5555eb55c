"""Log-probs and entropies of sampled tokens, computed chunk by chunk over the vocabulary head.

Only one chunk of ``[tokens, vocab]`` float32 logits exists at a time, in the forward and in the
backward pass (which recomputes the chunk's logits instead of keeping them), and the head is applied
only at response positions. A bfloat16/float16 head multiplies on tensor cores into float32 logits
(exact products, float32 accumulation): the precision of float32 logits at the speed of the raw model.
With ``compiled=True`` the softmax arithmetic of each chunk (log-normaliser, target log-prob, entropy;
in the backward the softmax gradient, cast to the head's dtype) runs as ``torch.compile``d kernels that
read the float32 logits once, instead of once per eager operation. With ``keep_grad=True`` the forward
keeps each chunk's d log p / d logits, (onehot - softmax) / T in the head's dtype, which the backward then
scales by each token's incoming gradient: no recomputed logits (the head's matmul runs twice instead of three
times), for [tokens, vocab] of memory in the head's dtype per forward until its backward.
"""

from functools import cache

import torch
from torch import Tensor
from transformers import PreTrainedModel

from stable_rl.padding import check_right_padded
from stable_rl.policy.packing import pack, unpack


def _logits(hidden: Tensor, weight: Tensor, temperature: float) -> Tensor:
    """``hidden`` [n, H] @ ``weight`` [V, H]^T / temperature in float32 (float64 for float64 inputs).

    bfloat16 *logits* would add ~0.05 nats of noise at logit values of 10-20, more than the
    training-inference gap being measured.
    """
    return _float32_mm(hidden.to(weight.dtype), weight.T).div_(temperature)


def _float32_mm(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b`` with a float32 result (float64 for float64 inputs): bfloat16/float16 operands on CUDA
    multiply on tensor cores into float32 (exact products, float32 accumulation); elsewhere both are
    upcast (bfloat16 values are exact in float32: the same result up to summation order)."""
    if a.is_cuda and a.dtype in (torch.bfloat16, torch.float16):
        return torch.mm(a, b, out_dtype=torch.float32)
    dtype = torch.promote_types(a.dtype, torch.float32)
    return a.to(dtype) @ b.to(dtype)


class _HeadLogprobs(torch.autograd.Function):
    """log softmax(h W^T / T)[target], chunk by chunk, with a hand-written backward that recomputes
    each chunk's logits: d log p_t / d z = onehot(t) - softmax(z), times 1/T, back through the matmul.
    The head's gradient is summed over the chunks in float32 and cast once; autocast is off inside
    (the logits are float32 by construction). ``keep``: the forward keeps each chunk's unit gradient
    instead (``keep_grad`` of ``token_logprobs_and_entropy``)."""

    @staticmethod
    def forward(
        ctx, hidden, weight, targets, temperature: float, chunk_size: int, entropy: bool, compiled: bool, keep: bool
    ):
        stats = _compiled(_chunk_stats) if compiled else _chunk_stats
        unit_grad = _logits_grad(compiled)
        keep = keep and any(ctx.needs_input_grad[:2])  # a pass without gradients (pi_old) keeps nothing
        parts, kept = [], []
        with torch.autocast(hidden.device.type, enabled=False):
            for i in range(0, max(hidden.shape[0], 1), chunk_size):  # an empty input: one empty chunk
                logits, chunk_targets = (
                    _logits(hidden[i : i + chunk_size], weight, temperature),
                    targets[i : i + chunk_size],
                )
                parts.append(stats(logits, chunk_targets, entropy))
                if keep:  # d log p / d logits: the gradient of a unit incoming gradient
                    chunk_log_z = parts[-1][1]
                    ones = torch.ones_like(chunk_log_z)
                    kept.append(unit_grad(logits, chunk_log_z, chunk_targets, ones, temperature, weight.dtype))
        logprobs, log_z, entropies = (torch.cat(p) if p[0] is not None else None for p in zip(*parts, strict=True))
        ctx.save_for_backward(hidden, weight, targets, log_z, *kept)
        ctx.temperature, ctx.chunk_size, ctx.compiled = temperature, chunk_size, compiled
        if entropies is not None:
            ctx.mark_non_differentiable(entropies)
        return logprobs, entropies

    @staticmethod
    def backward(ctx, grad_logprobs: Tensor, _grad_entropy):
        hidden, weight, targets, log_z, *kept = ctx.saved_tensors
        size, temperature = ctx.chunk_size, ctx.temperature
        logits_grad = _logits_grad(ctx.compiled)
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        summed = torch.promote_types(weight.dtype, torch.float32)  # the head's gradient, summed over chunks
        grad_weight = torch.zeros(weight.shape, dtype=summed, device=weight.device) if ctx.needs_input_grad[1] else None
        with torch.autocast(hidden.device.type, enabled=False):
            for chunk, i in enumerate(range(0, hidden.shape[0], size)):
                h = hidden[i : i + size]
                if kept:  # the unit gradient, scaled by each token's incoming one (in float32, then the head's dtype)
                    grad = (kept[chunk] * grad_logprobs[i : i + size, None].to(log_z.dtype)).to(weight.dtype)
                else:
                    logits = _logits(h, weight, temperature)  # [n, V]
                    g = grad_logprobs[i : i + size].to(logits.dtype)
                    grad = logits_grad(logits, log_z[i : i + size], targets[i : i + size], g, temperature, weight.dtype)
                if grad_hidden is not None:
                    grad_hidden[i : i + size] = grad @ weight
                if grad_weight is not None:
                    grad_weight += _float32_mm(grad.T, h.to(weight.dtype))
        grad_weight = None if grad_weight is None else grad_weight.to(weight.dtype)
        return grad_hidden, grad_weight, None, None, None, None, None, None


def _chunk_stats(logits: Tensor, targets: Tensor, entropy: bool):
    """One chunk's float32 ``logits`` [n, V] -> (log p(target) [n], log Z [n], entropy [n] or None)."""
    log_z = logits.logsumexp(dim=-1)  # [n]
    logprobs = logits.gather(-1, targets[:, None])[:, 0] - log_z  # [n]
    if not entropy:
        return logprobs, log_z, None
    probs = (logits - log_z[:, None]).exp_()  # [n, V]
    return logprobs, log_z, log_z - (probs * logits).sum(-1)


def _chunk_logits_grad(logits: Tensor, log_z: Tensor, targets: Tensor, g: Tensor, temperature: float, dtype):
    """d (sum g log p(target)) / d (h W^T) of one chunk, [n, V] in ``dtype``: g (onehot - softmax) / T."""
    grad = (logits - log_z[:, None]).exp() * -g[:, None]
    grad = grad.scatter_add(-1, targets[:, None], g[:, None])
    return (grad / temperature).to(dtype)


def _chunk_logits_grad_(logits: Tensor, log_z: Tensor, targets: Tensor, g: Tensor, temperature: float, dtype):
    """``_chunk_logits_grad`` computed in place in ``logits`` (eager: no second float32 [n, V] buffer)."""
    grad = logits.sub_(log_z[:, None]).exp_().mul_(-g[:, None]).scatter_add_(-1, targets[:, None], g[:, None])
    return grad.div_(temperature).to(dtype)


def _logits_grad(compiled: bool):
    """The chunk's d log p / d logits: compiled, or eager (written into the logits)."""
    return _compiled(_chunk_logits_grad) if compiled else _chunk_logits_grad_


@cache
def _compiled(fn):
    """``fn`` compiled once per process, its shapes dynamic (chunks and vocabularies vary)."""
    return torch.compile(fn, dynamic=True)


def token_logprobs_and_entropy(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    entropy: bool = True,
    compiled: bool = False,
    keep_grad: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """log softmax(h W^T / temperature)[target] and the entropy of that distribution, per token.

    ``hidden`` [N, H], ``weight`` [V, H] (the LM head), ``targets`` [N] -> ([N], [N] detached), or
    ([N], None) with ``entropy=False`` (an update needs no entropy: one pass less over each chunk's
    logits). Logits are float32 (see ``_logits``); gradients flow to ``hidden`` and ``weight``.
    ``compiled``: each chunk's softmax arithmetic runs compiled; ``keep_grad``: the forward keeps d log p / d
    logits for the backward instead of it recomputing the logits (see the module docstring).
    """
    return _HeadLogprobs.apply(hidden, weight, targets, temperature, chunk_size, entropy, compiled, keep_grad)


def sequence_logprobs(
    model: PreTrainedModel,
    input_ids: Tensor,
    attention_mask: Tensor,
    response_mask: Tensor,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    entropy: bool = True,
    compiled: bool = False,
    padding_mask: bool = True,
    packed: bool = False,
    keep_head_grad: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Position-aligned log pi(input_ids[:, t] | input_ids[:, :t]) and entropy at response positions.

    ``input_ids``, ``attention_mask``, ``response_mask`` [M, L] -> (logprobs [M, L], entropy [M, L]),
    zero where ``response_mask`` is False (entropy None with ``entropy=False``). Divides logits by the
    sampling ``temperature`` so pi_theta is the distribution mu_old sampled from. Assumes a plain
    linear LM head (no logit soft-capping). ``compiled``, ``keep_head_grad``: see ``token_logprobs_and_entropy``
    (its ``keep_grad``).

    ``padding_mask=False`` runs the decoder under its causal mask alone, for right-padded rows only: no
    real token attends to a later position, so none sees the padding and the log-probs are the masked
    model's (padding positions compute values nothing reads). Without a mask SDPA can run its
    FlashAttention kernel instead of the masked one.

    ``packed=True`` (right-padded rows) runs the decoder on the real tokens alone, as one packed row
    (``stable_rl.policy.packing``): the same log-probs, without computing any padding position.
    """
    decoder = model.get_decoder()
    if packed:
        ids, position_ids = pack(input_ids, attention_mask)
        out = decoder(input_ids=ids, position_ids=position_ids, use_cache=False)  # a cache hides the restarts
        hidden = unpack(out.last_hidden_state[0], attention_mask)
    else:
        if not padding_mask:
            check_right_padded(attention_mask)
        mask = attention_mask if padding_mask else None
        hidden = decoder(input_ids=input_ids, attention_mask=mask).last_hidden_state
    predicts = response_mask[:, 1:]  # [M, L-1]: position t-1 predicts response token t
    logprobs, entropies = token_logprobs_and_entropy(
        hidden[:, :-1][predicts],  # [N, H]
        model.get_output_embeddings().weight,
        input_ids[:, 1:][predicts],  # [N]
        temperature,
        chunk_size,
        entropy,
        compiled,
        keep_head_grad,
    )
    positions = torch.zeros_like(response_mask)
    positions[:, 1:] = predicts

    def aligned(values: Tensor) -> Tensor:
        return torch.zeros(input_ids.shape, dtype=values.dtype, device=input_ids.device).masked_scatter(
            positions, values
        )

    return aligned(logprobs), aligned(entropies) if entropy else None
