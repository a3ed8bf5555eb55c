"""Record and replay the routed experts of an HF MoE model through forward hooks on its routers.

Routes are ``[M, L, layers, k]`` integer tensors, position-aligned with ``input_ids`` [M, L]:
``routes[i, t, l]`` are the top-k experts layer l's router gave token ``input_ids[i, t]``; -1 marks
a position without a route (padding, and the last sampled token, which is never fed to the model).
Hooks exist only inside ``record``/``replay`` and act on this model's router instances alone. With
``packed=True`` the forward inside runs on the batch's real tokens as one packed row (``stable_rl.policy.packing``):
routes are still given and kept position-aligned with the padded batch (-1 at padding).
"""

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from stable_rl.policy.packing import unpack
from stable_rl.routing.families import moe_routers

ROUTE_DTYPE = torch.int16  # compact: up to 32,767 experts
DEGENERATE_CAUSE = (
    "these are not a router's routes (it picks k distinct experts, and not expert 0 for every token): were they "
    "captured? vLLM's FlashInfer MoE kernels return "
    "all-zero routed experts (vLLM 0.26 lacks the fix): run vLLM's Triton MoE kernels (its MoE backend setting) or a "
    "vLLM with the fix"
)


def routed_positions(attention_mask: Tensor) -> Tensor:
    """Positions [M, L] whose route matters: every token of a right-padded row but its last, which
    predicts nothing that is scored (and inference engines never route it)."""
    needed = attention_mask.bool().clone()
    last = attention_mask.sum(-1) - 1  # [M]
    needed[torch.arange(needed.shape[0], device=needed.device), last.clamp(min=0)] = False
    return needed


def routes_match(a: Tensor, b: Tensor) -> Tensor:
    """Whether two routings chose the same top-k expert *set*: ``a``, ``b`` [..., k] -> [...] bool."""
    return (a.sort(-1).values == b.to(a.device, a.dtype).sort(-1).values).all(-1)


class RouterHooks:
    """Record or replay the experts of every MoE router of ``model`` (one of ``FAMILIES``)."""

    def __init__(self, model: nn.Module) -> None:
        self.family, self.routers = moe_routers(model)
        self.top_k = self.routers[0].top_k
        self.num_experts = self.routers[0].num_experts
        self.own: Tensor | None = None  # [M, L, layers, k]: the routers' own choice in the last pass
        self.replayed_routes = torch.tensor(0)  # token-layers the last replay() gave the replayed route (needed ones)

    @property
    def num_layers(self) -> int:
        return len(self.routers)

    @contextmanager
    def _hooks(self, hook) -> Iterator[None]:
        handles = [
            router.register_forward_hook(lambda module, args, output, layer=layer: hook(module, output, layer))
            for layer, router in enumerate(self.routers)
        ]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    @contextmanager
    def record(self, input_ids: Tensor, attention_mask: Tensor | None = None, packed: bool = False) -> Iterator[None]:
        """Within the block, one forward of ``input_ids`` [M, L] (``packed``: of its real tokens, as
        ``attention_mask`` marks them); after it, ``self.own`` holds its routes [M, L, layers, k]."""
        chosen: dict[int, Tensor] = {}

        def hook(router, output, layer):
            chosen[layer] = output[2].detach()

        self.own = None
        with self._hooks(hook):
            yield
        self.own = self._stack(chosen, input_ids.shape, attention_mask if packed else None)

    @contextmanager
    def replay(self, routes: Tensor, attention_mask: Tensor, packed: bool = False) -> Iterator[None]:
        """Within the block, forwards of this batch (``packed``: of its real tokens as one packed row) use
        ``routes`` [M, L, layers, k] wherever a route is set, with gate weights recomputed from the router's
        own logits (so it keeps its gradient).

        Raises if ``routes`` is mis-shaped, out of range or missing at a position that matters, or if a
        layer's routes are left unused. After the block ``self.own`` holds the routers' own choice.
        """
        self._check(routes, attention_mask)
        fed = attention_mask.bool() if packed else None  # packed: only the real tokens are fed
        routes = routes.to(attention_mask.device, torch.long)
        flat = routes[fed] if fed is not None else routes.flatten(0, 1)  # [tokens fed, layers, k]
        needed = routed_positions(attention_mask)
        needed = needed[fed] if fed is not None else needed.flatten()  # [tokens fed]
        chosen: dict[int, Tensor] = {}
        replayed_needed: dict[int, Tensor] = {}  # layer -> tokens that need a route and got the replayed one

        def hook(router, output, layer):
            logits, _, own = output
            if own.shape[0] != flat.shape[0]:
                raise RuntimeError(
                    f"the router of MoE layer {layer} routed {own.shape[0]} tokens, the replayed batch has "
                    f"{flat.shape[0]} {'real ' if packed else ''}positions: replay(packed=...) must say whether "
                    "the forward runs on packed rows (model.init_args.runtime.packed_sequences)"
                )
            given = (flat[:, layer] >= 0).all(-1, keepdim=True)  # [tokens fed, 1]
            replayed = torch.where(given, flat[:, layer], own)
            chosen[layer] = own.detach()
            replayed_needed[layer] = (given[:, 0] & needed).sum()  # a recompute (checkpointing) counts once
            return logits, self.family.gates(router, logits, replayed), replayed

        self.own = None
        with self._hooks(hook):
            yield
        unused = [layer for layer in range(self.num_layers) if layer not in chosen]
        if unused:
            raise RuntimeError(
                f"routes of MoE layers {unused} were left unused: the forward inside replay() did not run "
                "those routers; run exactly one forward of the replayed batch inside the block"
            )
        self.replayed_routes = torch.stack(list(replayed_needed.values())).sum()  # on the device: read once, logged
        self.own = self._stack(chosen, attention_mask.shape, fed)

    def _stack(self, chosen: dict[int, Tensor], shape: torch.Size, fed: Tensor | None = None) -> Tensor:
        """The layers' routes at their positions of the [M, L] batch: [M, L, layers, k]; with ``fed`` (packed:
        the positions fed, [M, L]) -1 at the others."""
        if sorted(chosen) != list(range(self.num_layers)):
            raise RuntimeError(f"only MoE layers {sorted(chosen)} of {self.num_layers} routed this batch")
        routes = torch.stack([chosen[layer] for layer in range(self.num_layers)], dim=1)  # [tokens fed, layers, k]
        if fed is None:
            return routes.view(*shape, self.num_layers, self.top_k)
        return unpack(routes, fed.to(routes.device), fill=-1)

    def _check(self, routes: Tensor, attention_mask: Tensor) -> None:
        expected = (*attention_mask.shape, self.num_layers, self.top_k)
        if tuple(routes.shape) != expected:
            raise ValueError(
                f"routes of shape {tuple(routes.shape)} do not fit this batch and model: expected "
                f"[rows, positions, MoE layers, top-k] = {list(expected)}; were they recorded with another "
                "model or batch?"
            )
        if routes.is_floating_point():
            raise TypeError(f"routes must be integer expert indices, got {routes.dtype}")
        if routes.numel() and (routes.max() >= self.num_experts or routes.min() < -1):
            raise ValueError(
                f"routes hold expert indices in [{int(routes.min())}, {int(routes.max())}], outside "
                f"[0, {self.num_experts - 1}] (and -1 for 'no route'): recorded with another model?"
            )
        needed = routed_positions(attention_mask)  # [M, L]; the checks run where the batch is, one sync each
        routes = routes.to(needed.device)
        missing = needed & (routes < 0).any(-1).any(-1)
        if missing.any():
            row, position = (int(i) for i in missing.nonzero()[0])
            raise ValueError(
                f"{int(missing.sum())} tokens that need a route have none (first: row {row}, position "
                f"{position}): the rollout engine must capture the routes of every prompt and response "
                "token but the last (VLLMEngine/HFEngine with return_routes: true)"
            )
        repeated = (routes.sort(-1).values.diff(dim=-1) == 0).any(-1) & needed[..., None]  # [M, L, layers]
        if self.top_k > 1 and repeated.any():
            row, position, layer = (int(i) for i in repeated.nonzero()[0])
            raise ValueError(
                f"{int(repeated.sum())} token-layers name one expert twice in their top-{self.top_k} (first: MoE layer "
                f"{layer}, row {row}, position {position}: experts {routes[row, position, layer].tolist()}): "
                + DEGENERATE_CAUSE
            )
        # top-1: one token's expert 0 is a route; expert 0 for each of at least 64 token-layers is no router's choice
        if self.top_k == 1 and int(needed.sum()) * self.num_layers >= 64 and (routes[needed] == 0).all():
            raise ValueError(f"every route of the batch is expert 0 in every MoE layer: {DEGENERATE_CAUSE}")
