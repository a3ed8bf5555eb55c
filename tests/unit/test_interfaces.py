"""The checks of what one Lightning component asks of another (``stable_rl.interfaces``): they accept a real
policy module, whose ``policy`` is an ``nn.Module`` submodule (found through ``nn.Module.__getattr__``,
which Python 3.12's protocol ``isinstance`` does not consult: seen on the GPU machine's Python 3.12), and
refuse, naming the module, what lacks a member."""

import lightning as L
import pytest
from torch import nn

from stable_rl.interfaces import RouteSource, TrainedPolicy, conforms, route_source, trained_policy
from stable_rl.objectives import MiniRL
from stable_rl.policy.runtime import ModelRuntime
from stable_rl.rl import PolicyModule


class Submodule(nn.Module):
    """Declares the members as an ``nn.Module`` holds them: ``policy`` in ``_modules``, not ``__dict__``."""

    def __init__(self) -> None:
        super().__init__()
        self.policy = nn.Linear(2, 2)
        self.step_metrics = nn.ModuleDict()
        self.runtime = ModelRuntime()

    def batch_logprobs(self, batch, entropy: bool = True):
        return None, None


def test_members_behind_getattr_count():
    module = Submodule()
    assert "policy" not in vars(module)  # only __getattr__ finds it: what Python 3.12's isinstance misses
    assert conforms(module, TrainedPolicy)
    assert trained_policy(module, "RoutingReplay") is module


def test_a_configured_policy_module_is_a_trained_policy(tiny_model_path):
    module = PolicyModule(model_path=tiny_model_path, objective=MiniRL())
    module.configure_model()
    assert trained_policy(module, "RoutingReplay") is module


def test_a_module_without_the_members_is_refused_by_name():
    module = L.LightningModule()
    assert not conforms(module, TrainedPolicy)
    with pytest.raises(TypeError, match=r"RoutingReplay wraps .* train a stable_rl.rl.PolicyModule, not a "):
        trained_policy(module, "RoutingReplay")


def test_only_a_data_module_that_can_return_routes_is_a_route_source():
    class Routes(L.LightningDataModule):
        def request_routes(self) -> None: ...

    assert conforms(Routes(), RouteSource)
    assert route_source(L.Trainer(logger=False, enable_checkpointing=False)) is None
