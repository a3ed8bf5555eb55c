"""InstabilityMonitor: each sign raised at the step worked out by hand; stopping keeps a checkpoint."""

from types import SimpleNamespace

import pytest
import torch
from test_module import fixed_batch, train_on

from stable_rl.callbacks import InstabilityMonitor
from stable_rl.rl import PolicyModule

pytestmark = pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no `val_dataloader`")


def run(monitor, series: dict[str, list[float]]) -> None:
    logged = []
    module = SimpleNamespace(log=lambda name, value: logged.append((name, value)))
    for step in range(len(next(iter(series.values())))):
        metrics = {f"train/{name}": torch.tensor(values[step]) for name, values in series.items()}
        trainer = SimpleNamespace(callback_metrics=metrics, global_step=step)
        monitor.on_train_batch_end(trainer, module, None, None, step)
    return logged


@pytest.mark.parametrize(
    ("series", "sign", "step"),
    [
        # window means from step 1: 0.55, 0.6 (best), 0.4, 0.15 < 0.3 (1st), 0.1 (2nd: raised at step 5)
        ({"reward": [0.5, 0.6, 0.6, 0.2, 0.1, 0.1]}, "reward_collapse", 5),
        # means from step 1: 0.5, 0.3, 0.06, 0.015 < 0.02 (1st), 0.01 (2nd): step 5
        ({"entropy": [0.5, 0.5, 0.1, 0.02, 0.01, 0.01]}, "entropy_collapse", 5),
        # means: 0.01, 0.055 > 0.05 (1st), 0.1 (2nd): step 3
        ({"kl_k3": [0.01, 0.01, 0.1, 0.1, 0.01, 0.01]}, "kl_spike", 3),
        # means from step 1: 0.5, 1.5, 2.55 > 2 (1st), 3 (2nd): step 4
        ({"entropy": [0.5, 0.5, 2.5, 2.6, 3.4, 0.1]}, "entropy_explosion", 4),
        # means from step 1: 0, 0.5 > 0 (1st), 0.5 (2nd): step 3 (one skipped update is enough)
        ({"skipped_updates": [0.0, 0.0, 1.0, 0.0, 0.0, 0.0]}, "nonfinite_updates", 3),
    ],
)
def test_each_sign_is_raised_after_patience_steps(series, sign, step):
    monitor = InstabilityMonitor(window=2, patience=2, max_entropy=2.0, max_skipped_updates=0.0)
    with pytest.warns(UserWarning, match=f"instability at step {step} for 2 steps"):
        logged = run(monitor, series)
    assert monitor.incidents == [(step, sign)]
    assert logged == [("train/instability", 1.0), (f"train/instability/{sign}", 1.0)]


def test_a_disabled_check_never_fires():
    monitor = InstabilityMonitor(window=2, patience=2, reward_drop=None)
    run(monitor, {"reward": [0.5, 0.6, 0.6, 0.2, 0.1, 0.1]})
    assert monitor.incidents == []


def test_a_reward_drop_outside_0_1_is_refused():
    with pytest.raises(ValueError, match=r"reward_drop=1.5 must be in \(0, 1\), or null"):
        InstabilityMonitor(reward_drop=1.5)


def test_stop_keeps_a_checkpoint_and_ends_training(tiny_model_path, tmp_path):
    monitor = InstabilityMonitor(min_entropy=1e9, window=1, patience=1, stop=True, dirpath=str(tmp_path))
    module = PolicyModule(tiny_model_path)
    with pytest.warns(UserWarning, match="stopping, checkpoint kept at"):
        train_on(fixed_batch(vocab=2048), module, steps=5, callbacks=[monitor])
    assert module.trainer.global_step == 1
    checkpoint = torch.load(tmp_path / "instability-step=1.ckpt", weights_only=False)
    assert checkpoint["global_step"] == 1
    for name, value in module.policy.state_dict().items():
        assert torch.equal(checkpoint["state_dict"][f"policy.{name}"], value)


def test_state_survives_a_checkpoint_round_trip():
    monitor = InstabilityMonitor(window=2, patience=2)
    run(monitor, {"reward": [0.5, 0.6, 0.6, 0.2, 0.1]})  # means 0.55, 0.6, 0.4, 0.15: one step into a collapse
    resumed = InstabilityMonitor(window=2, patience=2)
    resumed.load_state_dict(monitor.state_dict())
    with pytest.warns(UserWarning, match="instability at step 0 for 2 steps"):  # the fake trainer restarts at 0
        run(resumed, {"reward": [0.1]})  # the second step of the collapse: raised at once
    assert resumed.incidents == [(0, "reward_collapse")]
