"""Routing Replay (paper Sec. 3.3): record and replay the experts of HF MoE routers."""

from stable_rl.routing.families import (
    FAMILIES,
    RouterFamily,
    is_router_weight,
    moe_layer_indices,
    moe_layers_of,
    moe_routers,
)
from stable_rl.routing.hooks import ROUTE_DTYPE, RouterHooks, routed_positions, routes_match

__all__ = [
    "FAMILIES",
    "ROUTE_DTYPE",
    "RouterFamily",
    "RouterHooks",
    "is_router_weight",
    "moe_layer_indices",
    "moe_layers_of",
    "moe_routers",
    "routed_positions",
    "routes_match",
]
