"""Simulated FP8 (e4m3) inference for the HF engine: the paper's FP8-inference / BF16-training gap on
hardware without FP8 kernels.

Every matrix weight (all >= 2-D parameters but the embeddings, the LM head and the MoE routers, which
FP8 serving keeps in 16 bits; MoE expert stacks included) is rounded to float8 e4m3 with one scale per
output row (row max / 448), and the input of every ``nn.Linear`` and of every MoE experts module is
rounded the same way with one scale per token, as W8A8 FP8 serving does; the arithmetic itself stays
in the engine's dtype.
"""

import torch
from torch import Tensor, nn

E4M3 = torch.float8_e4m3fn
E4M3_MAX = torch.finfo(E4M3).max  # 448


def fake_quantize(x: Tensor) -> Tensor:
    """``x`` rounded to e4m3 with one scale per row of its last dimension, back in ``x.dtype``."""
    scale = x.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-12) / E4M3_MAX
    return ((x.float() / scale).to(E4M3).float() * scale).to(x.dtype)


@torch.no_grad()
def quantize_weights_(model: nn.Module) -> int:
    """Round the model's matrix weights to e4m3 in place; returns how many tensors were rounded."""
    skip = {id(model.get_input_embeddings().weight), id(model.get_output_embeddings().weight)}
    count = 0
    for name, parameter in model.named_parameters():
        if parameter.ndim >= 2 and id(parameter) not in skip and not _is_router(name):
            parameter.copy_(fake_quantize(parameter))
            count += 1
    return count


def quantize_linear_inputs(model: nn.Module) -> list:
    """Round the input of every ``nn.Linear`` and MoE experts module (transformers 5 keeps expert stacks
    as 3-D parameters of an ``...Experts`` module) to e4m3 per token from now on; returns the hooks."""
    head = model.get_output_embeddings()
    return [
        module.register_forward_pre_hook(lambda mod, args: (fake_quantize(args[0]), *args[1:]))
        for name, module in model.named_modules()
        if (isinstance(module, nn.Linear) and module is not head and not _is_router(f"{name}.weight"))
        or type(module).__name__.endswith("Experts")
    ]


def _is_router(parameter_name: str) -> bool:
    """MoE router weights (``mlp.gate``, Mixtral's ``block_sparse_moe.gate``, Qwen2-MoE's shared-expert gate)."""
    return parameter_name.split(".")[-2:-1] in (["gate"], ["shared_expert_gate"])
