"""Settings changed on resume apply (and are named); another optimizer class is refused."""

import lightning as L
import pytest
import torch
from test_module import fixed_batch, train_on

from stable_rl import StableRLWarning
from stable_rl.objectives import MiniRL
from stable_rl.policy.resume_settings import apply_configured_optimizer, apply_to_live_optimizer, configured_optimizer
from stable_rl.rl import PolicyModule

GAMMA = 2 ** (1 / 20)


def saved_state(lr: float, steps: int, weight_decay: float = 0.0) -> dict:
    """A checkpoint's optimizer and scheduler states after ``steps`` AdamW updates under ExponentialLR."""
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.AdamW([weight], lr=lr, weight_decay=weight_decay)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=GAMMA)
    for _ in range(steps):
        weight.sum().backward()
        optimizer.step()
        scheduler.step()
    return {
        "optimizer_class": "AdamW",
        "optimizer_states": [optimizer.state_dict()],
        "lr_schedulers": [scheduler.state_dict()],
    }


def test_a_new_learning_rate_applies_and_the_schedule_goes_on_from_it():
    checkpoint = saved_state(lr=5e-4, steps=3)
    configured = configured_optimizer(lambda p: torch.optim.AdamW(p, lr=1e-4, weight_decay=0.0))
    assert apply_configured_optimizer(checkpoint, configured) == ["lr 0.0005 -> 0.0001"]
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.AdamW([weight], lr=1e-4, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=GAMMA)
    optimizer.load_state_dict(checkpoint["optimizer_states"][0])
    scheduler.load_state_dict(checkpoint["lr_schedulers"][0])
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-4 * GAMMA**3, rel=1e-12)
    assert len(optimizer.state[weight]) == 3  # the moments carry over (step, exp_avg, exp_avg_sq)
    weight.sum().backward()
    optimizer.step()
    scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-4 * GAMMA**4, rel=1e-12)
    assert scheduler.base_lrs == [1e-4]


def test_a_restored_optimizer_takes_the_new_settings_in_place():
    """As at the start of a resumed FSDP2 run, whose strategy loaded the sharded states into the optimizer and
    scheduler directly: the same rewrite, on the live objects; applied twice, the second changes nothing."""
    checkpoint = saved_state(lr=5e-4, steps=3)
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.AdamW([weight], lr=5e-4, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=GAMMA)
    optimizer.load_state_dict(checkpoint["optimizer_states"][0])
    scheduler.load_state_dict(checkpoint["lr_schedulers"][0])
    configured = configured_optimizer(lambda p: torch.optim.AdamW(p, lr=1e-4, weight_decay=0.01))
    assert apply_to_live_optimizer(optimizer, [scheduler], configured) == [
        "lr 0.0005 -> 0.0001",
        "weight_decay 0.0 -> 0.01",
    ]
    assert apply_to_live_optimizer(optimizer, [scheduler], configured) == []
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-4 * GAMMA**3, rel=1e-12)
    assert optimizer.param_groups[0]["weight_decay"] == 0.01 and len(optimizer.state[weight]) == 3
    weight.sum().backward()
    optimizer.step()
    scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-4 * GAMMA**4, rel=1e-12)
    assert scheduler.base_lrs == [1e-4] and scheduler.get_last_lr() == [optimizer.param_groups[0]["lr"]]


def test_other_hyperparameters_apply_too_and_no_change_changes_nothing():
    checkpoint = saved_state(lr=1e-4, steps=1)
    same = configured_optimizer(lambda p: torch.optim.AdamW(p, lr=1e-4, weight_decay=0.0))
    before = repr(checkpoint)
    assert apply_configured_optimizer(checkpoint, same) == []
    assert repr(checkpoint) == before
    decayed = configured_optimizer(lambda p: torch.optim.AdamW(p, lr=1e-4, weight_decay=0.01))
    assert apply_configured_optimizer(checkpoint, decayed) == ["weight_decay 0.0 -> 0.01"]
    assert checkpoint["optimizer_states"][0]["param_groups"][0]["weight_decay"] == 0.01


def test_another_optimizer_class_is_refused_with_the_fix():
    sgd = configured_optimizer(lambda p: torch.optim.SGD(p, lr=1e-4))
    with pytest.raises(
        ValueError, match=r"trained with AdamW, this run's model.optimizer is SGD: .* Resume with AdamW"
    ):
        apply_configured_optimizer(saved_state(lr=1e-4, steps=1), sgd)


def fit(module: PolicyModule, root, steps: int, ckpt_path=None, start: int = 0) -> L.Trainer:
    """Train to ``steps`` global steps (from ``ckpt_path``'s), one fixed batch of the right version each."""
    batches = [fixed_batch(vocab=2048, version=step) for step in range(start, steps)]
    return train_on(batches, module, steps, root=root, ckpt_path=ckpt_path).trainer


@pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no `val_dataloader`")
def test_a_resumed_module_trains_at_the_configured_rate_and_names_a_changed_objective(tiny_model_path, tmp_path):
    first = fit(PolicyModule(tiny_model_path, optimizer=lambda p: torch.optim.AdamW(p, lr=1e-3)), tmp_path, 1)
    first.save_checkpoint(tmp_path / "step1.ckpt")
    lower = PolicyModule(
        tiny_model_path, objective=MiniRL(eps_high=0.3), optimizer=lambda p: torch.optim.AdamW(p, lr=1e-5)
    )
    with pytest.warns(StableRLWarning) as warned:
        resumed = fit(lower, tmp_path, 2, ckpt_path=tmp_path / "step1.ckpt", start=1)
    messages = [str(w.message) for w in warned if w.category is StableRLWarning]  # on the terminal too
    assert "resumed with this run's optimizer settings, not the checkpoint's: lr 0.001 -> 1e-05" in messages
    assert any(m.startswith("resumed with objective {'class': 'MiniRL'") and "'eps_high': 0.3" in m for m in messages)
    assert resumed.optimizers[0].param_groups[0]["lr"] == 1e-5
