"""Simulated low-precision inference for the HF engine: the paper's FP8-inference / BF16-training gap, and
the rungs of a ladder of larger ones, on hardware without FP8 kernels.

What is rounded, with one of ``low_precision.FORMATS``: every matrix weight (all >= 2-D parameters but the
embeddings, the LM head and the MoE routers, which vLLM's FP8 keeps in 16 bits; MoE expert stacks
included) and the input of every ``nn.Linear`` and MoE experts module, as W8A8 serving does; with
``router``, the MoE routers' weights and inputs too (more routing flips than vLLM has). With
``use_fp8_kv_cache``, attention reads its keys (after RoPE) and values rounded to e4m3, as an FP8 KV cache
holds them. The arithmetic itself stays in the engine's dtype.
"""

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from stable_rl.rollout.low_precision import FORMATS, round_kv_fp8
from stable_rl.routing.families import is_router_weight

FP8_KV_ATTENTION = "sdpa_fp8_kv"  # transformers' sdpa attention over e4m3-rounded keys and values


@torch.no_grad()
def quantize_weights_(model: nn.Module, quantization: str = "fp8_per_channel", router: bool = False) -> int:
    """Round the model's matrix weights (and, with ``router``, its MoE routers) in place; returns how many
    tensors were rounded."""
    round_weight = FORMATS[quantization].weight
    skip = {id(model.get_input_embeddings().weight), id(model.get_output_embeddings().weight)}
    count = 0
    for name, parameter in model.named_parameters():
        if parameter.ndim >= 2 and id(parameter) not in skip and (router or not is_router_weight(name)):
            parameter.copy_(round_weight(parameter))
            count += 1
    return count


def quantize_linear_inputs(model: nn.Module, quantization: str = "fp8_per_channel", router: bool = False) -> list:
    """Round the input of every ``nn.Linear`` and MoE experts module (transformers 5 keeps expert stacks as
    3-D parameters of an ``...Experts`` module) and, with ``router``, of every MoE router from now on;
    returns the hooks."""
    round_input = FORMATS[quantization].activation
    head = model.get_output_embeddings()
    return [
        module.register_forward_pre_hook(lambda mod, args: (round_input(args[0]), *args[1:]))
        for name, module in model.named_modules()
        if module is not head and _input_is_rounded(name, module, router)
    ]


def use_fp8_kv_cache(model: nn.Module) -> None:
    """From now on attention reads keys and values rounded to e4m3 with scale 1.0 (the format of vLLM's
    uncalibrated ``kv_cache_dtype: fp8``). The cache keeps them unrounded and every step rounds all of them again,
    which equals rounding each once: the rounding is idempotent."""
    model.set_attn_implementation(FP8_KV_ATTENTION)


def _sdpa_over_fp8_kv(module: nn.Module, query, key, value, *args, **kwargs):
    """sdpa attention; key and value [B, kv_heads, S, head_dim] rounded as an FP8 KV cache stores them."""
    return sdpa_attention_forward(module, query, round_kv_fp8(key), round_kv_fp8(value), *args, **kwargs)


AttentionInterface.register(FP8_KV_ATTENTION, _sdpa_over_fp8_kv)
AttentionMaskInterface.register(FP8_KV_ATTENTION, sdpa_mask)  # the masks sdpa gets


def _input_is_rounded(name: str, module: nn.Module, router: bool) -> bool:
    if is_router_weight(f"{name}.weight"):
        return router
    return isinstance(module, nn.Linear) or type(module).__name__.endswith("Experts")
