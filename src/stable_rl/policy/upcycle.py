"""Sparse upcycling (Komatsuzaki et al., 2023): a dense Llama-architecture LM becomes a Mixtral MoE.

Every MLP becomes ``num_experts`` copies of itself (gate/up/down), optionally perturbed so the experts
can drift apart, behind a fresh router with small random weights; attention, norms and embeddings are
copied unchanged. Mixtral's router always renormalises its top-k probabilities to sum to 1, so with
``noise=0`` the MoE computes the dense model's function whatever the router picks (up to float rounding).
"""

import torch
from torch import Generator
from transformers import LlamaForCausalLM, MixtralConfig, MixtralForCausalLM
from transformers.initialization import no_init_weights

_SHARED = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_act",
    "max_position_embeddings",
    "initializer_range",
    "rms_norm_eps",
    "tie_word_embeddings",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "rope_parameters",
    "attention_dropout",
)


def upcycle(
    dense: LlamaForCausalLM,
    num_experts: int = 8,
    top_k: int = 2,
    noise: float = 0.0,
    router_std: float = 0.02,
    generator: Generator | None = None,
) -> MixtralForCausalLM:
    """The Mixtral MoE upcycled from ``dense`` (float32, on the CPU).

    Args:
        dense: a Llama-architecture model without attention or MLP biases (SmolLM2 is one).
        num_experts: experts per layer, each a copy of the layer's MLP.
        top_k: experts per token.
        noise: each expert's weight matrix gets Gaussian noise of ``noise`` times that matrix's standard
            deviation, drawn independently per expert; 0 keeps the experts identical.
        router_std: standard deviation of the router's normal initialisation.
        generator: the random source of the router and the noise.
    """
    config = dense.config
    if config.model_type != "llama" or config.attention_bias or config.mlp_bias:
        raise ValueError(
            f"upcycle needs a Llama model without biases, got model_type {config.model_type!r} "
            f"(attention_bias={getattr(config, 'attention_bias', None)}, mlp_bias={getattr(config, 'mlp_bias', None)})"
        )
    if not 1 <= top_k <= num_experts:
        raise ValueError(f"top_k={top_k} must be between 1 and num_experts={num_experts}")
    moe_config = MixtralConfig(
        **{name: getattr(config, name) for name in _SHARED},
        num_local_experts=num_experts,
        num_experts_per_tok=top_k,
        router_jitter_noise=0.0,
    )
    weights = {name: tensor.float() for name, tensor in dense.state_dict().items() if ".mlp." not in name}
    for i, layer in enumerate(dense.model.layers):
        mlp, prefix = layer.mlp, f"model.layers.{i}.mlp"
        gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).float()  # [2I, H]
        weights[f"{prefix}.experts.gate_up_proj"] = _copies(gate_up, num_experts, noise, generator)  # [E, 2I, H]
        weights[f"{prefix}.experts.down_proj"] = _copies(mlp.down_proj.weight.float(), num_experts, noise, generator)
        router = torch.randn(num_experts, config.hidden_size, generator=generator) * router_std  # [E, H]
        weights[f"{prefix}.gate.weight"] = router
    with no_init_weights():  # every weight is set just below: skip the random init of ~0.7B numbers
        moe = MixtralForCausalLM(moe_config)
    moe.load_state_dict(weights, strict=not config.tie_word_embeddings, assign=True)
    moe.tie_weights()  # lm_head is embed_tokens again where the config ties them
    moe.generation_config = dense.generation_config
    return moe.eval()


def _copies(weight: torch.Tensor, num_experts: int, noise: float, generator: Generator | None) -> torch.Tensor:
    """``num_experts`` copies of ``weight`` [out, in] -> [E, out, in], each plus noise x std(weight) x N(0, 1)."""
    copies = weight.detach().expand(num_experts, *weight.shape).clone()
    if noise:
        copies += torch.randn(copies.shape, generator=generator) * (noise * weight.std().item())
    return copies
