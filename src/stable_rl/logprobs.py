"""Log-probs and entropies of sampled tokens, computed chunk by chunk over the vocabulary head.

Only one chunk of ``[tokens, vocab]`` float32 logits exists at a time, in the forward and (through
activation checkpointing of each chunk) in the backward pass, and the head is applied only at
response positions.
"""

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint
from transformers import PreTrainedModel


def _chunk_logprobs_entropy(hidden: Tensor, weight: Tensor, targets: Tensor, temperature: float):
    """``hidden`` [n, H], ``weight`` [V, H], ``targets`` [n] -> log p(target) [n], entropy [n] (detached)."""
    logits = (hidden.to(weight.dtype) @ weight.T) / temperature  # [n, V], the only full-vocabulary tensor
    log_z = logits.logsumexp(dim=-1)  # [n]
    logprobs = logits.gather(-1, targets[:, None])[:, 0] - log_z  # [n]
    with torch.no_grad():
        probs = (logits - log_z[:, None]).exp()  # [n, V]
        entropy = log_z - (probs * logits).sum(-1)  # [n]
    return logprobs, entropy


def token_logprobs_and_entropy(
    hidden: Tensor, weight: Tensor, targets: Tensor, temperature: float = 1.0, chunk_size: int = 1024
) -> tuple[Tensor, Tensor]:
    """log softmax(h W^T / temperature)[target] and the entropy of that distribution, per token.

    ``hidden`` [N, H], ``weight`` [V, H] (the LM head), ``targets`` [N] -> ([N], [N] detached).
    Logits are computed in at least float32 (bfloat16 logits would add ~0.05 nats of noise at logit
    values of 10-20, more than the training-inference gap being measured): a bfloat16 head is
    upcast once per call, a [V, H] float32 copy.
    """
    weight = weight.to(torch.promote_types(weight.dtype, torch.float32))
    parts = []
    for start in range(0, hidden.shape[0], chunk_size):
        args = (hidden[start : start + chunk_size], weight, targets[start : start + chunk_size], temperature)
        if torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad):
            parts.append(checkpoint(_chunk_logprobs_entropy, *args, use_reentrant=False))
        else:
            parts.append(_chunk_logprobs_entropy(*args))
    logprobs, entropy = zip(*parts, strict=True)
    return torch.cat(logprobs), torch.cat(entropy)


def sequence_logprobs(
    model: PreTrainedModel,
    input_ids: Tensor,
    attention_mask: Tensor,
    response_mask: Tensor,
    temperature: float = 1.0,
    chunk_size: int = 1024,
) -> tuple[Tensor, Tensor]:
    """Position-aligned log pi(input_ids[:, t] | input_ids[:, :t]) and entropy at response positions.

    ``input_ids``, ``attention_mask``, ``response_mask`` [M, L] -> (logprobs [M, L], entropy [M, L]),
    zero where ``response_mask`` is False. Divides logits by the sampling ``temperature`` so pi_theta
    is the distribution mu_old sampled from. Assumes a plain linear LM head (no logit soft-capping).
    """
    hidden = model.get_decoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    predicts = response_mask[:, 1:]  # [M, L-1]: position t-1 predicts response token t
    logprobs, entropy = token_logprobs_and_entropy(
        hidden[:, :-1][predicts],  # [N, H]
        model.get_output_embeddings().weight,
        input_ids[:, 1:][predicts],  # [N]
        temperature,
        chunk_size,
    )
    out_logprobs = torch.zeros(input_ids.shape, dtype=logprobs.dtype, device=input_ids.device)
    out_entropy = torch.zeros(input_ids.shape, dtype=entropy.dtype, device=input_ids.device)
    positions = torch.zeros_like(response_mask)
    positions[:, 1:] = predicts
    return out_logprobs.masked_scatter(positions, logprobs), out_entropy.masked_scatter(positions, entropy)
