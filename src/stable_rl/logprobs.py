"""Log-probs and entropies of sampled tokens, computed chunk by chunk over the vocabulary head.

Only one chunk of ``[tokens, vocab]`` float32 logits exists at a time, in the forward and in the
backward pass (which recomputes the chunk's logits instead of keeping them), and the head is applied
only at response positions. A bfloat16/float16 head multiplies on tensor cores into float32 logits
(exact products, float32 accumulation): the precision of float32 logits at the speed of the raw model.
"""

import torch
from torch import Tensor
from transformers import PreTrainedModel


def _logits(hidden: Tensor, weight: Tensor, temperature: float) -> Tensor:
    """``hidden`` [n, H] @ ``weight`` [V, H]^T / temperature in float32 (float64 for float64 inputs).

    bfloat16/float16 weights on CUDA: one half-precision matmul with a float32 output; elsewhere both
    operands are upcast (bfloat16 values are exact in float32, so the result is the same up to summation
    order). bfloat16 *logits* would add ~0.05 nats of noise at logit values of 10-20, more than the
    training-inference gap being measured.
    """
    if hidden.is_cuda and weight.dtype in (torch.bfloat16, torch.float16):
        logits = torch.mm(hidden.to(weight.dtype), weight.T, out_dtype=torch.float32)
    else:
        dtype = torch.promote_types(weight.dtype, torch.float32)
        logits = hidden.to(dtype) @ weight.to(dtype).T
    return logits.div_(temperature)


class _HeadLogprobs(torch.autograd.Function):
    """One chunk: log softmax(h W^T / T)[target] with a hand-written backward that recomputes the
    chunk's logits: d log p_t / d z = onehot(t) - softmax(z), times 1/T, back through the matmul."""

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, targets: Tensor, temperature: float, entropy: bool):
        logits = _logits(hidden, weight, temperature)  # [n, V], the only full-vocabulary tensor
        log_z = logits.logsumexp(dim=-1)  # [n]
        logprobs = logits.gather(-1, targets[:, None])[:, 0] - log_z  # [n]
        ctx.save_for_backward(hidden, weight, targets, log_z)
        ctx.temperature = temperature
        if not entropy:
            return logprobs, None
        probs = (logits - log_z[:, None]).exp_()  # [n, V]
        result = log_z - (probs * logits).sum(-1)  # [n]
        ctx.mark_non_differentiable(result)
        return logprobs, result

    @staticmethod
    def backward(ctx, grad_logprobs: Tensor, _grad_entropy):
        hidden, weight, targets, log_z = ctx.saved_tensors
        grad = _logits(hidden, weight, ctx.temperature).sub_(log_z[:, None]).exp_()  # softmax [n, V]
        grad.mul_(-grad_logprobs[:, None]).scatter_add_(-1, targets[:, None], grad_logprobs[:, None])
        grad = grad.div_(ctx.temperature).to(weight.dtype)
        grad_hidden = (grad @ weight).to(hidden.dtype) if ctx.needs_input_grad[0] else None
        grad_weight = grad.T @ hidden.to(weight.dtype) if ctx.needs_input_grad[1] else None
        return grad_hidden, grad_weight, None, None, None


def token_logprobs_and_entropy(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    entropy: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """log softmax(h W^T / temperature)[target] and the entropy of that distribution, per token.

    ``hidden`` [N, H], ``weight`` [V, H] (the LM head), ``targets`` [N] -> ([N], [N] detached), or
    ([N], None) with ``entropy=False`` (an update needs no entropy: one pass less over each chunk's
    logits). Logits are float32 (see ``_logits``); gradients flow to ``hidden`` and ``weight``.
    """
    parts = [
        _HeadLogprobs.apply(
            hidden[start : start + chunk_size], weight, targets[start : start + chunk_size], temperature, entropy
        )
        for start in range(0, hidden.shape[0], chunk_size)
    ]
    logprobs, entropies = zip(*parts, strict=True)
    return torch.cat(logprobs), torch.cat(entropies) if entropy else None


def sequence_logprobs(
    model: PreTrainedModel,
    input_ids: Tensor,
    attention_mask: Tensor,
    response_mask: Tensor,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    entropy: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """Position-aligned log pi(input_ids[:, t] | input_ids[:, :t]) and entropy at response positions.

    ``input_ids``, ``attention_mask``, ``response_mask`` [M, L] -> (logprobs [M, L], entropy [M, L]),
    zero where ``response_mask`` is False (entropy None with ``entropy=False``). Divides logits by the sampling ``temperature`` so pi_theta
    is the distribution mu_old sampled from. Assumes a plain linear LM head (no logit soft-capping).
    """
    hidden = model.get_decoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    predicts = response_mask[:, 1:]  # [M, L-1]: position t-1 predicts response token t
    logprobs, entropies = token_logprobs_and_entropy(
        hidden[:, :-1][predicts],  # [N, H]
        model.get_output_embeddings().weight,
        input_ids[:, 1:][predicts],  # [N]
        temperature,
        chunk_size,
        entropy,
    )
    positions = torch.zeros_like(response_mask)
    positions[:, 1:] = predicts

    def aligned(values: Tensor) -> Tensor:
        return torch.zeros(input_ids.shape, dtype=values.dtype, device=input_ids.device).masked_scatter(
            positions, values
        )

    return aligned(logprobs), aligned(entropies) if entropy else None
