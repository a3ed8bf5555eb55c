"""Faster kernels for the policy's forward and backward, each an option of ``HFPolicyModule`` and off by
default: Liger's fused MoE experts and RMSNorm (``liger``), regional ``torch.compile`` of the decoder
layers around the MoE routers (``compile``). Routing Replay works with every one: the routers stay the
model's own eager modules."""

from stable_rl.kernels.compile import compile_decoder_layers
from stable_rl.kernels.liger import LIGER, register_liger_experts, use_liger_norms

__all__ = ["LIGER", "compile_decoder_layers", "register_liger_experts", "use_liger_norms"]
