"""Regional ``torch.compile`` of the decoder layers, around the MoE routers.

Each decoder layer's attention (with its q/k norms and rotary embedding), its RMSNorms, its dense MLP
and its MoE experts are compiled in place (``nn.Module.compile``: same modules, same parameters), so
Inductor fuses their elementwise work (norms, rotary, SwiGLU, the experts' token permutation and gate
weighting) into few kernels. The routers are left out and run eagerly: Dynamo does not guard on module
hooks, so a router inside a compiled region would keep ignoring the forward hooks Routing Replay adds and
removes around every pass. Experts are compiled only where Inductor traces them whole, transformers'
``grouped_mm`` in bfloat16 (in other dtypes it falls back to a per-expert loop that breaks the graph;
Liger's kernel is compiled already). Shapes are dynamic from the start (micro-batches differ in length):
one graph per module class and grad mode.
"""

import torch
from torch import nn

from stable_rl.compat.transformers import no_split_module_classes
from stable_rl.routing import moe_routers


def compile_decoder_layers(policy: nn.Module) -> list[nn.Module]:
    """Compile the router-free parts of every decoder layer of ``policy``; returns the compiled modules."""
    try:
        routers = {id(router) for router in moe_routers(policy)[1]}
    except ValueError:  # a dense model (or a family whose routers replay does not know): nothing to keep out
        routers = set()
    layer_classes = no_split_module_classes(policy)
    compiled = []
    for layer in (m for m in policy.modules() if type(m).__name__ in layer_classes):
        for module in _router_free(layer, routers):
            if _traceable(module):
                module.compile(dynamic=True)
                compiled.append(module)
    return compiled


def _router_free(module: nn.Module, routers: set[int]) -> list[nn.Module]:
    """The largest children of ``module`` that hold no router (the routers themselves excluded)."""
    parts = []
    for child in module.children():
        if id(child) in routers:
            continue
        if any(id(m) in routers for m in child.modules()):
            parts += _router_free(child, routers)
        else:
            parts.append(child)
    return parts


def _traceable(module: nn.Module) -> bool:
    """Everything but MoE experts outside transformers' ``grouped_mm`` in bfloat16."""
    if not hasattr(module, "gate_up_proj"):  # not a module of stacked experts
        return True
    implementation = getattr(module.config, "_experts_implementation", None)
    return implementation == "grouped_mm" and module.gate_up_proj.dtype == torch.bfloat16
