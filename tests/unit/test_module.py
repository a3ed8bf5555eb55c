"""PolicyModule on a fixed, hand-made rollout batch (the engine is not what is tested here)."""

from types import SimpleNamespace

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from stable_rl import StableRLWarning
from stable_rl.batch_plan import BatchPlan
from stable_rl.callbacks import PolicyForwardCallback
from stable_rl.objectives import CISPO, MiniRL
from stable_rl.objectives.minirl import minirl_token_loss
from stable_rl.policy.finite import first_nonfinite
from stable_rl.policy.runtime import ModelRuntime
from stable_rl.rl import PolicyModule
from stable_rl.rollout import RolloutBatch, Sample

# these tests hand the trainer one fixed training batch and no evaluation sets
pytestmark = pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no `val_dataloader`")


def fixed_batch(vocab: int, prompts: int = 2, group: int = 4, version: int = 0) -> RolloutBatch:
    g = torch.Generator().manual_seed(0)
    samples = []
    for p in range(prompts):
        prompt = torch.randint(3, vocab, (3 + p,), generator=g).tolist()
        for _ in range(group):
            n = int(torch.randint(1, 6, (1,), generator=g))
            response = torch.randint(3, vocab, (n,), generator=g).tolist()
            samples.append(Sample(prompt, response, (-torch.rand(n, generator=g) * 4).tolist()))
    rewards = torch.tensor([1.0, 0, 0, 1, 0, 0, 0, 1])[: prompts * group]
    return RolloutBatch.from_samples(samples, rewards, group, 0, temperature=1.0, policy_version=version)


def train_on(
    batch: RolloutBatch | list[RolloutBatch],
    module: PolicyModule,
    steps: int,
    callbacks=(),
    root=None,
    ckpt_path=None,
    mini_batch_size: int | None = None,
    micro_batch_size: int | None = None,
):
    """Fit ``module`` on one fixed batch (or on these batches in turn) for ``steps`` optimizer updates
    (from ``ckpt_path``'s step when given); the batches carry the plan of ``mini_batch_size`` and
    ``micro_batch_size``, as the data module's do."""
    trainer = L.Trainer(
        max_steps=steps,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=list(callbacks),
        default_root_dir=root,
    )
    batches = batch if isinstance(batch, list) else [batch]
    for each in batches:
        each.plan = BatchPlan(each.num_rows // each.group_size, each.group_size, mini_batch_size, micro_batch_size)
    trainer.fit(module, train_dataloaders=DataLoader(batches, collate_fn=lambda rows: rows[0]), ckpt_path=ckpt_path)
    return module


def params_after(tiny_model_path, batch, mini_batch_size=None, micro_batch_size=None, **kwargs):
    torch.manual_seed(0)
    module = PolicyModule(tiny_model_path, optimizer=lambda p: torch.optim.SGD(p, lr=0.5), **kwargs)
    mini = mini_batch_size or batch.num_rows
    train_on(batch, module, steps=batch.num_rows // mini, mini_batch_size=mini, micro_batch_size=micro_batch_size)
    return torch.cat([p.detach().flatten() for p in module.policy.parameters()])


@pytest.mark.parametrize("objective", [MiniRL(), CISPO()], ids=["minirl", "cispo"])
def test_micro_batch_size_does_not_change_the_update(tiny_model_path, objective):
    batch = fixed_batch(vocab=2048)
    whole = params_after(tiny_model_path, batch, objective=objective, mini_batch_size=4)
    split = params_after(tiny_model_path, batch, objective=objective, mini_batch_size=4, micro_batch_size=1)
    torch.testing.assert_close(split, whole, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("max_grad_norm", "clipped"), [(1e-6, 1.0), (1e6, 0.0)])
def test_the_fraction_of_clipped_updates_is_logged(tiny_model_path, max_grad_norm, clipped):
    """The 4 updates of a global step: a threshold below every gradient norm rescales all of them, one
    above every norm none; ``train/grad_clipped`` is the fraction."""
    batch = fixed_batch(vocab=2048)
    module = PolicyModule(tiny_model_path, max_grad_norm=max_grad_norm)
    metrics = train_on(batch, module, steps=4, mini_batch_size=2).trainer.callback_metrics
    assert 1e-6 < metrics["train/grad_norm"].item() < 1e6
    assert metrics["train/grad_clipped"].item() == clipped


def test_n_mini_batches_make_n_updates(tiny_model_path):
    batch = fixed_batch(vocab=2048)
    module = PolicyModule(tiny_model_path)
    train_on(batch, module, steps=4, mini_batch_size=2)
    assert module.trainer.global_step == 4  # 8 responses / 2 per mini-batch


@pytest.mark.parametrize("max_grad_norm", [None, 0.01], ids=["unclipped", "clipped"])
def test_first_update_matches_hand_computed_sgd_step(tiny_model_path, max_grad_norm):
    """One on-policy SGD step equals theta - lr * grad of Eq. 7 computed directly with autograd; clipped, the
    gradient scaled by max_grad_norm / (its global norm + 1e-6) (torch's clip_grad_norm_ rule)."""
    batch = fixed_batch(vocab=2048)
    module = PolicyModule(tiny_model_path, optimizer=lambda p: torch.optim.SGD(p, lr=0.1), max_grad_norm=max_grad_norm)
    module.configure_model()
    reference = PolicyModule(tiny_model_path)
    reference.configure_model()
    logprobs, _ = reference.batch_logprobs(batch)
    adv = (batch.rewards.view(-1, 4) - batch.rewards.view(-1, 4).mean(-1, keepdim=True)).view(-1, 1)
    weight = (logprobs.detach() - batch.rollout_logprobs).exp().clamp(max=5.0)
    loss = -(weight * adv * logprobs * batch.response_mask).sum() / batch.num_rows
    loss.backward()
    grads = [p.grad for p in reference.policy.parameters()]
    norm = torch.cat([g.flatten() for g in grads]).double().norm().item()
    scale = 1.0 if max_grad_norm is None else min(1.0, max_grad_norm / (norm + 1e-6))
    assert max_grad_norm is None or scale < 0.5  # the clipped case does clip
    expected = [p.detach() - 0.1 * scale * p.grad for p in reference.policy.parameters()]
    train_on(batch, module, steps=1)
    assert module.trainer.callback_metrics["train/grad_norm"].item() == pytest.approx(norm, rel=1e-5)
    for got, want in zip(module.policy.parameters(), expected, strict=True):
        torch.testing.assert_close(got.detach(), want, rtol=1e-5, atol=1e-6)


def test_stale_rollout_is_refused(tiny_model_path):
    module = PolicyModule(tiny_model_path)
    with pytest.raises(RuntimeError, match="on-policy lag 0"):
        train_on(fixed_batch(vocab=2048, version=3), module, steps=1)


def test_indivisible_mini_batch_names_the_fix(tiny_model_path):
    module = PolicyModule(tiny_model_path)
    with pytest.raises(ValueError, match=r"must be divisible by data.mini_batch_size=3"):
        train_on(fixed_batch(vocab=2048), module, steps=1, mini_batch_size=3)


def test_scheduler_steps_after_every_optimizer_update(tiny_model_path):
    module = PolicyModule(
        tiny_model_path,
        optimizer=lambda p: torch.optim.SGD(p, lr=0.8),
        lr_scheduler=lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5),
    )
    train_on(fixed_batch(vocab=2048), module, steps=4, mini_batch_size=2)
    assert module.optimizers().param_groups[0]["lr"] == pytest.approx(0.8 * 0.5**4)


def test_two_mini_batches_update_against_the_pi_old_of_the_step(tiny_model_path):
    """N = 2: the second update's clip mask and ratio use pi_old from before the first update."""
    batch = fixed_batch(vocab=2048)
    lr = 50.0
    module = PolicyModule(tiny_model_path, optimizer=lambda p: torch.optim.SGD(p, lr=lr), max_grad_norm=None)
    module.configure_model()
    reference = PolicyModule(tiny_model_path)
    reference.configure_model()
    with torch.no_grad():
        old, _ = reference.batch_logprobs(batch)  # theta_0
    adv = (batch.rewards.view(-1, 4) - batch.rewards.view(-1, 4).mean(-1, keepdim=True)).view(-1)
    masks = []
    for rows in (slice(0, 4), slice(4, 8)):
        part = batch.rows(rows)
        reference.policy.zero_grad()
        logprobs, _ = reference.batch_logprobs(part)
        out = minirl_token_loss(logprobs, old[rows], part.rollout_logprobs, adv[rows], part.response_mask)
        (out.token_loss.sum() / 4).backward()
        with torch.no_grad():
            for p in reference.policy.parameters():
                p -= lr * p.grad
        masks.append(out.token_metrics["clip_fraction"][part.response_mask].sum().item())
    assert masks[0] == 0 and masks[1] > 0  # the second mini-batch is off-policy and clipped
    train_on(batch, module, steps=2, mini_batch_size=4)
    for got, want in zip(module.policy.parameters(), reference.policy.parameters(), strict=True):
        torch.testing.assert_close(got.detach(), want.detach(), rtol=1e-4, atol=1e-5)


def policy_and_pi_old(tiny_model_path, batch: RolloutBatch) -> tuple[PolicyModule, torch.Tensor, torch.Tensor]:
    """A module with log pi_old and entropy of ``batch`` before its first step (on-policy, N = 1, a step's
    metrics are of the policy before its update)."""
    module = PolicyModule(tiny_model_path, optimizer=lambda p: torch.optim.SGD(p, lr=1e-3))
    module.configure_model()
    with torch.no_grad():
        old, entropy = module.batch_logprobs(batch)
    return module, old, entropy


def test_kl_and_entropy_metrics_are_those_of_pi_old(tiny_model_path):
    batch = fixed_batch(vocab=2048)
    module, old, entropy = policy_and_pi_old(tiny_model_path, batch)
    mask = batch.response_mask
    trainer_metrics = train_on(batch, module, steps=1).trainer.callback_metrics
    expected_kl = (batch.rollout_logprobs - old)[mask].mean()  # log mu_old - log pi_old over sampled tokens
    torch.testing.assert_close(trainer_metrics["train/kl"], expected_kl, rtol=1e-5, atol=1e-6)
    ratio = (old - batch.rollout_logprobs).exp()  # pi_old / mu_old of each sampled token
    expected_k3 = (ratio - 1 - ratio.log())[mask].mean()  # k3: r - 1 - log r
    torch.testing.assert_close(trainer_metrics["train/kl_k3"], expected_k3, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(trainer_metrics["train/entropy"], entropy[mask].mean(), rtol=1e-5, atol=1e-6)
    assert expected_kl > 1.0  # the fixed batch's log mu (about -2) is above the random policy's log pi (about -7.6)


def test_groups_with_signal_is_the_fraction_of_prompts_whose_rewards_differ(tiny_model_path):
    batch = fixed_batch(vocab=2048, prompts=2, group=4)  # rewards [1, 0, 0, 1] and [0, 0, 0, 1]
    batch.rewards[4:] = 1.0  # the second prompt's group all correct: zero advantages, no learning signal
    module, _, _ = policy_and_pi_old(tiny_model_path, batch)
    metrics = train_on(batch, module, steps=1).trainer.callback_metrics
    assert metrics["train/groups_with_signal"].item() == 0.5


def nan_batch(version: int = 0) -> RolloutBatch:
    batch = fixed_batch(vocab=2048, version=version)
    batch.rollout_logprobs[0, batch.response_mask[0].nonzero()[0, 0]] = float("nan")  # a broken engine log-prob
    return batch


def test_a_non_finite_update_is_skipped_without_a_trace(tiny_model_path):
    """NaN batch then a good one: the same weights as training on the good one alone (the optimizer's
    state untouched by the skipped update), the skip counted, and its step slot too."""
    counts, timeouts = [], []

    class Counts(L.Callback):
        def on_train_batch_end(self, trainer, *args):
            counts.append(float(trainer.callback_metrics["train/skipped_updates"]))
            timeouts.append(float(trainer.callback_metrics["train/verifier_timeouts"]))

    def trained(batches):
        torch.manual_seed(0)
        module = PolicyModule(tiny_model_path, optimizer=lambda p: torch.optim.AdamW(p, lr=1e-2))
        train_on(batches, module, steps=len(batches), callbacks=[Counts()])
        return torch.cat([p.detach().flatten() for p in module.policy.parameters()]), module.trainer.global_step

    with pytest.warns(StableRLWarning, match="non-finite loss or gradient at step 0: update skipped"):
        good = fixed_batch(vocab=2048, version=1)
        good.verifier_timeouts = 2  # responses the data module's verifier scored 0 after its timeout
        skipped_first, steps = trained([nan_batch(version=0), good])
    assert counts == [1.0, 0.0] and steps == 2
    assert timeouts == [0.0, 2.0]
    good_only, _ = trained([fixed_batch(vocab=2048)])
    assert torch.equal(skipped_first, good_only)


def test_non_finite_updates_in_a_row_stop_with_the_last_good_state(tiny_model_path, tmp_path):
    module = PolicyModule(tiny_model_path, max_nonfinite_updates=2)
    with (
        pytest.warns(StableRLWarning, match=r"update skipped \([12] in a row"),
        pytest.raises(FloatingPointError, match=r"2 updates in a row .* lower"),
    ):
        train_on([nan_batch(version=0), nan_batch(version=1)], module, steps=5, root=tmp_path)
    saved = torch.load(tmp_path / "checkpoints" / "nonfinite-step=2.ckpt", weights_only=False)["state_dict"]
    initial = PolicyModule(tiny_model_path)
    initial.configure_model()
    for key, value in initial.policy.state_dict().items():
        assert torch.equal(saved[f"policy.{key}"], value), key  # no update ever reached the weights


@pytest.mark.parametrize(
    ("optimizer", "lr"), [(torch.optim.SGD, float("nan")), (torch.optim.AdamW, float("inf")), (torch.optim.AdamW, 0.0)]
)
def test_a_learning_rate_that_is_not_finite_and_positive_is_refused(tiny_model_path, optimizer, lr):
    """torch's optimizers accept these (AdamW an infinite rate: every weight non-finite after one update)."""
    module = PolicyModule(tiny_model_path, optimizer=lambda params: optimizer(params, lr=lr))
    module.configure_model()
    with pytest.raises(ValueError) as caught:
        module.configure_optimizers()
    assert str(caught.value) == (
        f"model.init_args.optimizer.init_args.lr={lr} must be a finite number > 0: an infinite or NaN rate makes "
        "every weight non-finite, a rate of 0 never trains and a negative one climbs the loss. Set the rate you "
        "mean, e.g. 1.0e-5"
    )


def test_the_non_finite_guard_saves_no_checkpoint_of_a_non_finite_state(tiny_model_path, tmp_path):
    """Weights an earlier update made non-finite (here set so) make every later update non-finite: the guard
    stops, and saves no "last good state" of NaN weights."""
    module = PolicyModule(tiny_model_path, max_nonfinite_updates=2)
    module.configure_model()
    name, weight = next(iter(module.policy.named_parameters()))
    with torch.no_grad():
        weight[0, 0] = float("inf")
    with (
        pytest.warns(StableRLWarning, match=r"update skipped \([12] in a row"),
        pytest.raises(FloatingPointError) as caught,
    ):
        train_on([fixed_batch(vocab=2048, version=0), fixed_batch(vocab=2048, version=1)], module, 5, root=tmp_path)
    assert str(caught.value) == (
        "2 updates in a row had a non-finite (NaN/inf) loss or gradient, and the model's state is itself "
        f"non-finite ({name}): an earlier update made it so (a learning rate too large, an overflow), so no "
        "checkpoint was saved. Resume with --ckpt_path from a checkpoint written before that update, with a lower "
        "model.optimizer learning rate or training in float32 (model.dtype)"
    )
    assert not list(tmp_path.glob("**/*.ckpt"))


def test_non_finite_optimizer_state_is_named():
    layer = torch.nn.Linear(2, 1)
    optimizer = torch.optim.AdamW(layer.parameters())
    layer(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    assert first_nonfinite(layer, optimizer) is None
    optimizer.state[layer.bias]["exp_avg_sq"].fill_(float("nan"))
    assert first_nonfinite(layer, optimizer) == "optimizer state 'exp_avg_sq' of bias"


def test_a_checkpoint_of_another_model_names_its_origin(tiny_model_path, tiny_dense_path):
    moe = PolicyModule(tiny_model_path)
    moe.configure_model()
    checkpoint = {
        "state_dict": {f"policy.{k}": v for k, v in moe.policy.state_dict().items()},
        "hyper_parameters": {"model_path": tiny_model_path},
    }
    dense = PolicyModule(tiny_dense_path)
    dense.configure_model()
    with pytest.raises(ValueError, match=rf"trained from {tiny_model_path}, .* --model.init_args.model_path="):
        dense.on_load_checkpoint(checkpoint)
    moe.on_load_checkpoint(checkpoint)  # its own checkpoint loads


def test_step_breakdown_phases_add_up_to_the_step(tiny_model_path):
    """time/<phase> every step; from the second step time/step = the phases + time/overhead."""
    logged = []

    class Times(L.Callback):
        def on_train_batch_end(self, trainer, *args):
            logged.append({k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("time/")})

    batches = [fixed_batch(vocab=2048, version=step) for step in (0, 1)]
    for batch in batches:
        batch.timings = {"rollout": 0.25, "reward": 0.5}  # as the data module reports them
    train_on(batches, PolicyModule(tiny_model_path), steps=2, callbacks=[Times()])
    first, second = logged
    assert set(first) == {"time/rollout", "time/reward", "time/pi_old", "time/update"}
    assert set(second) == set(first) | {"time/step", "time/overhead"}
    assert (first["time/rollout"], first["time/reward"]) == (0.25, 0.5)
    parts = sum(v for k, v in second.items() if k not in ("time/step", "time/overhead"))
    assert second["time/overhead"] == pytest.approx(second["time/step"] - parts, abs=1e-6)
    assert second["time/pi_old"] > 0 and second["time/update"] > 0


class PhaseLog(PolicyForwardCallback):
    """(phase, rows) of every policy forward of a step."""

    def __init__(self) -> None:
        self.calls = []

    def policy_forward(self, module, phase, batch):
        self.calls.append((phase, sorted(batch.row_index.tolist())))
        return super().policy_forward(module, phase, batch)


@pytest.mark.parametrize(
    ("mini", "expected"),
    [
        (8, [("first", [2, 3, 4, 5]), ("first", [0, 1, 6, 7])]),  # on-policy: no separate pi_old pass
        (4, [("old", [4, 5, 6, 7]), ("first", [0, 1, 2, 3]), ("update", [4, 5, 6, 7])]),
    ],
)
def test_the_first_mini_batch_forward_is_its_pi_old_pass(tiny_model_path, mini, expected):
    """pi_old is recomputed only for mini-batches 2..N; micro-batches of 4 rows, the longest first."""
    batch = fixed_batch(vocab=2048)
    assert batch.attention_mask.sum(-1).tolist() == [4, 6, 8, 8, 8, 7, 5, 6]
    log = PhaseLog()
    module = PolicyModule(tiny_model_path)
    train_on(batch, module, steps=8 // mini, callbacks=[log], mini_batch_size=mini, micro_batch_size=4)
    assert log.calls == expected


@pytest.mark.parametrize("strategy", ["FSDPStrategy", "DeepSpeedStrategy"])
def test_fsdp1_and_deepspeed_are_refused_with_the_fix(tiny_model_path, strategy):
    from lightning.pytorch import strategies

    mine = type(f"My{strategy}", (getattr(strategies, strategy),), {})
    module = PolicyModule(tiny_model_path)
    module._trainer = SimpleNamespace(
        strategy=mine.__new__(mine), precision="32-true", checkpoint_callbacks=[], log_dir=None
    )
    with pytest.raises(ValueError, match=rf"My{strategy} is not supported .* use stable_rl.strategies.FSDP2Strategy"):
        module.setup("fit")


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed", "bf16-true", "64-true"])
def test_lightning_precision_plugins_are_refused_with_the_fix(tiny_model_path, precision):
    module = PolicyModule(tiny_model_path)
    module._trainer = SimpleNamespace(strategy=None, precision=precision)
    with pytest.raises(ValueError, match=rf"trainer.precision={precision} casts .* set model.init_args.dtype"):
        module.setup("fit")


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"max_grad_norm": 0.0}, r"max_grad_norm=0.0 must be > 0, or null for no clipping"),
        ({"max_grad_norm": -1.0}, r"max_grad_norm=-1.0 must be > 0, or null for no clipping"),
        ({"max_nonfinite_updates": 0}, r"max_nonfinite_updates=0 must be at least 1"),
    ],
)
def test_limits_that_would_mean_something_else_are_refused(tiny_model_path, setting, message):
    with pytest.raises(ValueError, match=message):
        PolicyModule(tiny_model_path, **setting)


def test_an_unwritable_checkpoint_or_log_directory_fails_before_the_first_rollout(tiny_model_path, tmp_path):
    (tmp_path / "a_file").write_text("not a directory")
    module = PolicyModule(tiny_model_path)
    checkpoints = SimpleNamespace(dirpath=str(tmp_path / "a_file" / "checkpoints"))
    module._trainer = SimpleNamespace(
        strategy=None, precision="32-true", checkpoint_callbacks=[checkpoints], log_dir=None
    )
    with pytest.raises(ValueError, match=r"a_file/checkpoints is not a writable directory .* set the ModelCheckpoint"):
        module.setup("fit")
    checkpoints.dirpath = str(tmp_path / "ok" / "checkpoints")
    module._trainer.log_dir = str(tmp_path / "a_file" / "logs")
    with pytest.raises(
        ValueError, match=r"a_file/logs is not a writable directory .* trainer.logger.init_args.save_dir"
    ):
        module.setup("fit")
    assert (tmp_path / "ok" / "checkpoints").is_dir()


def test_the_base_classes_settings_reach_it_by_name(tiny_model_path):
    """PolicyModule hands HFPolicyModule its settings by keyword: each lands on the attribute of its own name."""
    runtime = ModelRuntime(compile_layers=True, logprob_chunk_size=7, gradient_checkpointing=True)
    module = PolicyModule(tiny_model_path, dtype="bfloat16", mixed_precision="float32", runtime=runtime)
    assert (module.model_path, module.dtype_name, module.mixed_precision) == (tiny_model_path, "bfloat16", "float32")
    assert module.runtime is runtime and PolicyModule(tiny_model_path).runtime == ModelRuntime()
