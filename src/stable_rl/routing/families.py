"""Which HF MoE families routing replay supports, and how each one's router turns logits into gates.

In transformers 5 every supported family has a top-k router module returning
``(router_logits [n, E], gate_weights [n, k], expert_indices [n, k])``; they differ only in how the
top-k softmax probabilities are normalised and cast. Replay (paper Sec. 3.3) keeps the router's own
logits and normalisation and swaps in the replayed indices, so an adapter is that rule.
"""

import re
from dataclasses import dataclass

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class RouterFamily:
    """How one model family's top-k router computes its gate weights.

    Args:
        model_type: ``config.model_type`` of the family.
        router_class: class name of its top-k router module.
        always_renormalize: the top-k probabilities are always renormalised to sum to 1 (Mixtral);
            otherwise the router's ``norm_topk_prob`` decides (Qwen2/3-MoE, OLMoE).
        cast_to_logits_dtype: gate weights are cast back to the logits' dtype (all but Mixtral).
    """

    model_type: str
    router_class: str
    always_renormalize: bool = False
    cast_to_logits_dtype: bool = True

    def gates(self, router: nn.Module, logits: Tensor, indices: Tensor) -> Tensor:
        """Gate weights [n, k] of experts ``indices`` [n, k] from ``logits`` [n, E], as the router does."""
        probs = torch.softmax(logits.float(), dim=-1)  # [n, E]
        gates = probs.gather(-1, indices)  # [n, k]
        if self.always_renormalize or router.norm_topk_prob:
            gates = gates / gates.sum(dim=-1, keepdim=True)
        return gates.to(logits.dtype) if self.cast_to_logits_dtype else gates


FAMILIES = {
    family.model_type: family
    for family in (
        RouterFamily("qwen3_moe", "Qwen3MoeTopKRouter"),
        RouterFamily("qwen2_moe", "Qwen2MoeTopKRouter"),
        RouterFamily("olmoe", "OlmoeTopKRouter"),
        RouterFamily("mixtral", "MixtralTopKRouter", always_renormalize=True, cast_to_logits_dtype=False),
    )
}


def is_router_weight(parameter_name: str) -> bool:
    """Whether a parameter (by its HF name) is an MoE router's weight: ``mlp.gate``, Mixtral's
    ``block_sparse_moe.gate``, Qwen2-MoE's shared-expert gate (what vLLM's FP8 keeps in 16 bits)."""
    return parameter_name.split(".")[-2:-1] in (["gate"], ["shared_expert_gate"])


def moe_routers(model: nn.Module) -> tuple[RouterFamily, list[nn.Module]]:
    """The model's family adapter and its routers in layer order (one per MoE layer).

    Raises a ValueError naming the supported families for a dense model or an unsupported family.
    """
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", type(model).__name__)
    supported = ", ".join(sorted(FAMILIES))
    if model_type not in FAMILIES:
        kind = "an unsupported MoE family" if _looks_moe(config) else "a dense model (no MoE router)"
        raise ValueError(
            f"routing replay needs a Mixture-of-Experts policy, but model_type {model_type!r} is {kind}; "
            f"supported families: {supported}. Remove the RoutingReplay callback from trainer.callbacks "
            "for this model"
        )
    family = FAMILIES[model_type]
    routers = [m for m in model.modules() if type(m).__name__ == family.router_class]
    if not routers:
        raise ValueError(
            f"{model_type!r} model has no {family.router_class} module: this transformers version's "
            "MoE layout is not the one routing replay supports (transformers >= 5)"
        )
    return family, routers


def moe_layer_indices(model: nn.Module) -> list[int]:
    """The decoder-layer index of each MoE layer, in router order: inference engines that return one
    route column per hidden layer (vLLM) leave dense layers (``mlp_only_layers``, ``decoder_sparse_step``)
    empty, and routing replay keeps the MoE ones. Raises as ``moe_routers`` does."""
    _, routers = moe_routers(model)
    names = {id(module): name for name, module in model.named_modules()}
    indices = []
    for router in routers:
        found = re.search(r"(?:^|\.)layers\.(\d+)\.", names[id(router)])
        if found is None:
            raise ValueError(f"router {names[id(router)]!r} is in no numbered decoder layer (layers.<i>)")
        indices.append(int(found.group(1)))
    return indices


def moe_layers_of(model_path: str) -> list[int]:
    """``moe_layer_indices`` of the HF model at ``model_path``, built on the meta device (no weights read)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return moe_layer_indices(model)


def _looks_moe(config) -> bool:
    return any(
        getattr(config, name, None)
        for name in ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
    )
