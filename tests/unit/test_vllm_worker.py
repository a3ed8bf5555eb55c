"""stable-rl's vLLM worker extension: what crosses to an engine in its own process comes back exactly."""

from types import SimpleNamespace

import numpy as np
import torch
from torch import nn

from stable_rl.rollout.vllm_engine import _as_bytes
from stable_rl.rollout.vllm_worker import StableRLWorker, routes_of_bytes


class Worker(StableRLWorker):
    """vLLM's worker as the extension sees it: ``reload_weights`` (here: keeps what it is given) and a model runner."""

    def __init__(self) -> None:
        self.loaded: dict[str, torch.Tensor] = {}
        self.model_runner = SimpleNamespace(get_model=lambda: nn.Linear(2, 2))  # no fused-MoE layer to repack

    def reload_weights(self, weights_iterator) -> None:
        self.loaded = dict(weights_iterator)


def test_weights_sent_as_bytes_arrive_as_they_left():
    torch.manual_seed(0)
    weights = {
        "a.weight": torch.randn(3, 4),
        "b.weight": torch.randn(5, dtype=torch.bfloat16),
        "c.scale": torch.tensor(2.5),
        "d.t": torch.randn(4, 3).t(),  # not contiguous
    }
    worker = Worker()
    assert worker.stable_rl_load(_as_bytes(weights.items())) == 0
    assert list(worker.loaded) == list(weights)
    for name, tensor in weights.items():
        assert worker.loaded[name].dtype == tensor.dtype and torch.equal(worker.loaded[name], tensor), name


def test_routes_sent_as_bytes_arrive_as_they_left():
    routes = np.array(
        [[[0, 3], [-1, -1]], [[2, 1], [1, 0]], [[3, 0], [0, 2]]], dtype=np.int16
    )  # [3 positions, 2 layers, k 2]
    back = routes_of_bytes(routes.tobytes(), list(routes.shape))
    assert back.dtype == np.int16 and np.array_equal(back, routes) and back.flags.writeable
