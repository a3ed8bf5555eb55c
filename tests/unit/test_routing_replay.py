"""RoutingReplay callbacks inside PolicyModule's training step, on the tiny Qwen3-MoE."""

import pytest
import torch
from test_module import fixed_batch, train_on
from transformers import AutoModelForCausalLM

from stable_rl.callbacks import RoutingReplay
from stable_rl.objectives import MiniRL
from stable_rl.policy.runtime import ModelRuntime
from stable_rl.rl import PolicyModule
from stable_rl.routing import RouterHooks, moe_routers, routed_positions, routes_match

pytestmark = pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no `val_dataloader`")


class Spy(MiniRL):
    """MiniRL that keeps the log pi_theta of every update's micro-batch."""

    def __init__(self) -> None:
        super().__init__()
        self.logprobs = []

    def __call__(self, inputs):
        self.logprobs.append(inputs.logprobs.detach().clone())
        return super().__call__(inputs)


class HandedRoutesR3(RoutingReplay):
    """R3 with the rollout routes handed in by the test (no rollout engine to turn on)."""

    def __init__(self) -> None:
        super().__init__("R3")

    def setup(self, trainer, pl_module, stage) -> None:
        pass


def fit(tiny_model_path, batch, callbacks, lr=20.0):
    torch.manual_seed(0)
    spy = Spy()
    module = PolicyModule(tiny_model_path, objective=spy, optimizer=lambda p: torch.optim.SGD(p, lr=lr))
    train_on(batch, module, steps=2, callbacks=callbacks, mini_batch_size=4)
    return spy.logprobs, module.trainer.logged_metrics


def experts_calls(model):
    """Expert indices each MoE layer's experts module is called with, call after call."""
    calls = []
    blocks = [layer.mlp for layer in model.model.layers]
    for layer, block in enumerate(blocks):
        block.experts.register_forward_pre_hook(lambda mod, args, layer=layer: calls.append((layer, args[1].clone())))
    return calls


def test_r2_leaves_the_first_mini_batch_unchanged_and_replays_pi_old_routes_after(tiny_model_path):
    """The paper's Table 1: R2 changes nothing in the first mini-batch (pi_theta = pi_old there)."""
    batch = fixed_batch(vocab=2048)
    plain, _ = fit(tiny_model_path, batch, [])
    replayed, metrics = fit(tiny_model_path, batch, [RoutingReplay("R2")])
    assert torch.equal(replayed[0], plain[0])
    assert not torch.equal(replayed[1], plain[1])  # the second mini-batch ran with pi_old's experts
    # first mini-batch: the updated routers agree with pi_old fully; after one SGD step they do not
    assert 0.5 < metrics["train/routing/update_agreement"] < 1.0


def test_r3_replays_the_rollout_routes_in_the_old_pass_and_every_update(tiny_model_path):
    batch = fixed_batch(vocab=2048)
    inference = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    with torch.no_grad():
        for router in moe_routers(inference)[1]:  # an inference engine that routes differently
            router.weight.add_(torch.randn(router.weight.shape, generator=torch.Generator().manual_seed(3)))
    hooks = RouterHooks(inference)
    with hooks.record(batch.input_ids):
        inference(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
    batch.routes = hooks.own.to(torch.int16)
    batch.routes[~routed_positions(batch.attention_mask)] = -1  # as an engine returns them: none where none is needed

    # what the metrics must say, from the training model before any update
    training = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    reference = PolicyModule(tiny_model_path)
    reference.policy = training
    own = RouterHooks(training)
    with torch.no_grad(), own.record(batch.input_ids):
        free, _ = reference.batch_logprobs(batch)
    free_routes = own.own
    with torch.no_grad(), own.replay(batch.routes, batch.attention_mask):
        old, _ = reference.batch_logprobs(batch)
    needed = routed_positions(batch.attention_mask)
    mask = batch.response_mask

    class Watched(HandedRoutesR3):
        def on_fit_start(self, trainer, pl_module):
            super().on_fit_start(trainer, pl_module)
            self.calls = experts_calls(pl_module.policy)

    callback = Watched()
    _, metrics = fit(tiny_model_path, batch, [callback])

    # micro-batches of 4 rows = the mini-batches, 4 layers each: the pi_old pass of rows 4-7 (diagnostic,
    # then replayed), then the first update, rows 0-3, which is also their pi_old pass (diagnostic, then
    # replayed), then the update of rows 4-7
    passes = [callback.calls[i : i + 4] for i in range(0, len(callback.calls), 4)]
    assert len(passes) == 5
    for index, start in ((1, 4), (3, 0), (4, 4)):
        (rows, part), *_ = batch.rows(slice(start, start + 4)).length_sorted_parts(4)
        rows, width = rows + start, part.input_ids.shape[1]
        want, keep = batch.routes[rows, :width].flatten(0, 1).long(), needed[rows, :width].flatten()
        for layer, indices in passes[index]:
            assert torch.equal(indices[keep], want[keep, layer])
    torch.testing.assert_close(
        metrics["train/routing/infer_agreement"], routes_match(free_routes, batch.routes)[needed].float().mean()
    )
    assert metrics["train/routing/infer_agreement"] < 0.5
    k3 = lambda logprobs: ((logprobs - batch.rollout_logprobs).exp() - 1 - (logprobs - batch.rollout_logprobs))[mask]  # noqa: E731
    torch.testing.assert_close(metrics["train/kl_no_replay"], (batch.rollout_logprobs - free)[mask].mean())
    torch.testing.assert_close(metrics["train/kl"], (batch.rollout_logprobs - old)[mask].mean())
    torch.testing.assert_close(metrics["train/kl_k3_no_replay"], k3(free).mean())
    torch.testing.assert_close(metrics["train/kl_k3"], k3(old).mean())
    # replayed: the pi_old pass of rows 4-7, the first update (rows 0-3) and the update of rows 4-7, 4 layers each
    replays = 4 * (needed[4:].sum() + needed[:4].sum() + needed[4:].sum())
    assert metrics["train/routing/replayed_routes"] == float(replays)


def test_r3_refuses_a_batch_without_routes(tiny_model_path):
    with pytest.raises(ValueError, match=r"without routes.*return_routes: true"):
        fit(tiny_model_path, fixed_batch(vocab=2048), [HandedRoutesR3()])


def test_r3_needs_a_rollout_engine(tiny_model_path):
    with pytest.raises(ValueError, match="replays the rollout engine's routes"):
        fit(tiny_model_path, fixed_batch(vocab=2048), [RoutingReplay("R3")])


def test_replay_on_a_dense_model_is_refused(tiny_dense_path):
    with pytest.raises(ValueError, match="dense model"):
        fit(tiny_dense_path, fixed_batch(vocab=2048), [RoutingReplay("R2")])


def test_unused_routes_are_an_error():
    callback = RoutingReplay("R2")
    callback.replayed = torch.tensor([True, False, True])
    with pytest.raises(RuntimeError, match="routes of 1 of 3 rollouts were never replayed"):
        callback.on_train_batch_end(None, None, None, fixed_batch(vocab=2048, prompts=1, group=3), 0)


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match=r"'R2' .* or 'R3'"):
        RoutingReplay("R4")


@pytest.mark.parametrize("replay", [None, "R2", "R3"])
def test_gradient_checkpointing_makes_the_same_updates_with_and_without_replay(tiny_model_path, replay):
    """The backward's recompute of each layer routes as its forward did (R2: the router's own choice, R3:
    the replayed rollout routes), so 2 large updates (N = 2) end at the weights of a run that keeps all
    activations."""
    batch = fixed_batch(vocab=2048)
    if replay == "R3":
        scores = torch.rand(*batch.input_ids.shape, 4, 8, generator=torch.Generator().manual_seed(1))
        batch.routes = scores.argsort(-1)[..., :2].to(torch.int16)  # 4 MoE layers, 2 distinct of 8 experts
        batch.routes[~routed_positions(batch.attention_mask)] = -1  # as an engine returns them
    weights = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        callbacks = {None: [], "R2": [RoutingReplay("R2")], "R3": [HandedRoutesR3()]}[replay]
        module = PolicyModule(
            tiny_model_path,
            optimizer=lambda p: torch.optim.SGD(p, lr=20.0),
            runtime=ModelRuntime(gradient_checkpointing=checkpointing),
        )
        train_on(batch, module, steps=2, callbacks=callbacks, mini_batch_size=4)
        assert module.policy.is_gradient_checkpointing == checkpointing
        weights.append(torch.cat([p.detach().flatten() for p in module.policy.parameters()]))
    start = torch.cat([p.flatten() for p in AutoModelForCausalLM.from_pretrained(tiny_model_path).parameters()])
    assert (weights[0] - start).abs().max() > 1e-3  # the updates moved the weights
    torch.testing.assert_close(weights[1], weights[0], rtol=0, atol=1e-6)
