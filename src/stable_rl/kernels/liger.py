"""Liger-Kernel's Triton kernels in the policy, per model instance (no class of transformers is patched).

- ``experts_implementation: liger``: the MoE experts run Liger's fused MoE (``LigerFusedMoEFunction``): the
  token gather, the grouped gate/up GEMM and SwiGLU in one kernel, the grouped down GEMM, and the
  gate-weighted sum of each token's experts in another; its backward gathers instead of scatter-adding.
  It is registered under that name in transformers' experts registry, so the router stays the model's own
  module and Routing Replay's hooks keep choosing the experts and gates the kernel receives.
- ``kernels: liger``: every RMSNorm (also the per-head q/k norms) is replaced by Liger's fused RMSNorm
  (forward and backward one kernel each, HF's "llama" casting), sharing the same weight.

Liger runs on CUDA GPUs only (``pip install liger-kernel``, with Triton).
"""

import torch
from torch import Tensor, nn
from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

LIGER = "liger"
# RMSNorms that compute weight * (x / rms(x)).to(input dtype), as Liger's "llama" casting mode does
LLAMA_STYLE_NORMS = {
    "LlamaRMSNorm",
    "MistralRMSNorm",
    "MixtralRMSNorm",
    "OlmoeRMSNorm",
    "Qwen2MoeRMSNorm",
    "Qwen2RMSNorm",
    "Qwen3MoeRMSNorm",
    "Qwen3RMSNorm",
}


def liger_experts_forward(experts: nn.Module, hidden_states: Tensor, top_k_index: Tensor, top_k_weights: Tensor):
    """The experts of one MoE layer through Liger's fused MoE: ``hidden_states`` [n, H], the router's
    ``top_k_index`` and ``top_k_weights`` [n, k] -> [n, H]."""
    from liger_kernel.ops.fused_moe import LigerFusedMoEFunction

    if experts.gate_up_proj.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(
            f"experts_implementation=liger multiplies {experts.gate_up_proj.dtype} weights in TF32 (Triton's "
            "default), not in float32: train in model.dtype bfloat16, or use experts_implementation grouped_mm"
        )
    layout = (experts.has_gate, experts.has_bias, experts.is_transposed, experts.is_concatenated)
    if layout != (True, False, False, True) or experts.config.hidden_act not in ("silu", "swish"):
        raise ValueError(
            f"experts_implementation=liger needs SwiGLU experts with concatenated [gate; up] weights and no bias; "
            f"{type(experts).__name__} is not such a module: use grouped_mm"
        )
    weights = top_k_weights.to(hidden_states.dtype)
    return LigerFusedMoEFunction.apply(
        hidden_states, experts.gate_up_proj, experts.down_proj, top_k_index.to(torch.int32), weights
    )


def register_liger_experts() -> None:
    """Make ``experts_implementation="liger"`` a name transformers accepts (its public extension point)."""
    ALL_EXPERTS_FUNCTIONS.register(LIGER, liger_experts_forward)


def use_liger_norms(policy: nn.Module) -> int:
    """Replace every RMSNorm of ``policy`` by Liger's, holding the same weight; returns how many."""
    from liger_kernel.transformers.rms_norm import LigerRMSNorm

    norms = [(name, m) for name, m in policy.named_modules() if type(m).__name__.endswith("RMSNorm")]
    other = sorted({type(m).__name__ for _, m in norms} - LLAMA_STYLE_NORMS)
    if other:
        raise ValueError(f"kernels=liger: {', '.join(other)} may not normalise as Liger's llama-style RMSNorm does")
    for name, norm in norms:
        parent, _, attribute = name.rpartition(".")
        fused = LigerRMSNorm(norm.weight.shape[0], eps=norm.variance_epsilon, casting_mode="llama", in_place=False)
        fused.weight = norm.weight
        setattr(policy.get_submodule(parent), attribute, fused)
    return len(norms)
