"""Overlapped rollouts (data.overlap at data.max_staleness >= 1) with a fake engine and policy: the batch of step
t + k is generated in a thread while step t's update runs, and everything is what the sequential order gives."""

import threading
import time
import traceback
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from stable_rl.data import ReasoningGymPrompts
from stable_rl.policy.snapshot import WeightSnapshot
from stable_rl.rl import RolloutDataModule
from stable_rl.rollout import RolloutEngine, Sample

WAIT = 10.0  # seconds an event may take before the test fails (never reached when the code is right)


class FakeEngine(RolloutEngine):
    """Samples a response of tokens drawn from the step (its seed) and the weights' version, recording every call
    with its thread and times; a call from a background thread returns only once the update of the step whose
    weights it holds has started (``updates`` counts those started)."""

    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__(max_new_tokens=4)
        self.events: list[tuple] = []
        self.loaded = -1
        self.started = False
        self.fail_at = fail_at
        self.changed = threading.Condition()
        self.updates, self.began = 0, set()  # updates started, steps whose rollout began in the background

    def start(self, model_path: str, max_model_len: int) -> None:
        self.started = True

    def load_weights(self, named_tensors) -> None:
        self.loaded = int(dict(named_tensors)["w"].item())
        self.events.append(("sync", self.loaded))

    def generate(self, prompt_ids, group_size, step, sampling=None, first_index=0):
        start, background = time.monotonic(), threading.current_thread() is not threading.main_thread()
        if background:
            with self.changed:
                self.began.add(step)
                self.changed.notify_all()
            if step == self.fail_at:
                raise OSError(f"the engine failed at step {step}")
            with self.changed:
                assert self.changed.wait_for(lambda: self.updates > self.loaded, WAIT), "no update ran beside it"
        samples = [
            Sample(p, [5 + (step * 7 + self.loaded * 3 + i + j) % 50 for i in range(3)], [-0.5 - 0.1 * step] * 3)
            for p in prompt_ids
            for j in range(group_size)
        ]
        self.events.append(("generate", step, self.loaded, background, start, time.monotonic()))
        return samples

    def close(self) -> None:
        self.started = False

    @property
    def running(self) -> bool:
        return self.started


class FakeVerifier:
    """Rewards by the response's length; a gold answer in a box scores 1 (so every problem is usable)."""

    timeout = 1.0

    def score(self, texts, answers):
        rewards = [1.0 if t == f"\\boxed{{{a}}}" else float(len(t) % 2) for t, a in zip(texts, answers, strict=True)]
        return torch.tensor(rewards), torch.zeros(len(texts), dtype=torch.bool)

    def close(self) -> None:
        pass


class FakePolicy:
    """Weights that are their step's number; log pi_gen of a batch is the number of the weights it is scored with."""

    def __init__(self, trainer) -> None:
        self.trainer = trainer

    def full_weights(self):
        yield "w", torch.tensor(float(self.trainer.global_step))

    def weight_snapshot(self) -> int:
        return self.trainer.global_step

    def generation_logprobs(self, batch, weights=None) -> torch.Tensor:
        version = self.trainer.global_step if weights is None else weights
        return torch.full(batch.input_ids.shape, float(version))


def data_module(tiny_model_path, engine, **kwargs) -> RolloutDataModule:
    kwargs.setdefault("max_staleness", 1)
    data = RolloutDataModule(
        ReasoningGymPrompts(["chain_sum"], size=12, seed=3),  # 6 steps an epoch
        engine=engine,
        verifier=FakeVerifier(),  # type: ignore[arg-type]
        prompts_per_step=2,
        group_size=2,
        seed=0,
        model_path=tiny_model_path,
        **kwargs,
    )
    data.trainer = SimpleNamespace(global_rank=0, local_rank=0, world_size=1, num_devices=1, global_step=0)
    data.trainer.lightning_module = FakePolicy(data.trainer)
    data.setup("fit")
    return data


def train(data: RolloutDataModule, steps: int, updates: list | None = None) -> list:
    """``steps`` steps of rollouts, each followed by an update that waits for the rollout generated beside it
    (overlapped) and records when it ran."""
    engine, batches, windows = data.engine, [], iter(data.train_dataloader())
    for t in range(steps):
        data.trainer.global_step = t
        batches.append(data.rollout(next(windows)))
        start = time.monotonic()
        update_started(engine, t)
        if data.overlap:
            with engine.changed:
                assert engine.changed.wait_for(lambda t=t: t + data.max_staleness in engine.began, WAIT), t
        time.sleep(0.02)
        if updates is not None:
            updates.append((t, start, time.monotonic()))
    data.trainer.global_step = steps
    return batches


def update_started(engine: FakeEngine, step: int) -> None:
    with engine.changed:
        engine.updates = step + 1
        engine.changed.notify_all()


def test_the_rollout_of_the_next_step_is_generated_while_this_step_updates(tiny_model_path):
    updates: list = []
    data = data_module(tiny_model_path, FakeEngine())
    train(data, 4, updates)
    generated = {e[1]: e for e in data.engine.events if e[0] == "generate"}
    assert [(step, e[2], e[3]) for step, e in sorted(generated.items())] == [
        (0, 0, False),  # the first step's batch, generated before its update (nothing to overlap yet)
        (1, 0, True),
        (2, 1, True),
        (3, 2, True),
        (4, 3, True),  # (step the batch is trained at, weights that generated it, in the background thread)
    ]
    for t, start, end in updates:
        _, _, _, _, began, finished = generated[t + 1]
        assert began < end and finished > start, t  # the rollout of step t + 1 ran during the update of step t
    data.teardown("fit")


def test_the_sequential_order_generates_each_rollout_before_the_update(tiny_model_path):
    updates: list = []
    data = data_module(tiny_model_path, FakeEngine(), overlap=False)
    train(data, 3, updates)
    generated = {e[1]: e for e in data.engine.events if e[0] == "generate"}
    for t, start, _ in updates:
        assert not generated[t + 1][3] and generated[t + 1][5] < start, t


@pytest.mark.parametrize("staleness", [1, 2])
def test_overlapped_batches_are_the_sequential_ones(tiny_model_path, staleness):
    runs = {}
    for overlap in (False, True):
        data = data_module(tiny_model_path, FakeEngine(), max_staleness=staleness, overlap=overlap)
        batches = train(data, 5)
        data.teardown("fit")  # joins what the last step generated: the queue is the sequential one
        runs[overlap] = (batches, list(data.in_flight.batches), data.engine.events)
    for sequential, overlapped in zip(runs[False][0] + runs[False][1], runs[True][0] + runs[True][1], strict=True):
        for name in ("input_ids", "response_mask", "rollout_logprobs", "rewards", "generation_logprobs"):
            assert torch.equal(getattr(sequential, name), getattr(overlapped, name)), name
        assert sequential.policy_version == overlapped.policy_version
        # log pi_gen is scored with the weights that generated the batch, not those of the step that joined it
        assert torch.equal(
            overlapped.generation_logprobs, torch.full_like(overlapped.generation_logprobs, overlapped.policy_version)
        )
    assert [e[:3] for e in runs[False][2]] == [e[:3] for e in runs[True][2]]  # syncs and generations, in order
    assert [b.policy_version for b in runs[True][0]] == [max(0, t - staleness) for t in range(5)]


def test_the_timings_say_what_ran_in_the_background(tiny_model_path):
    data = data_module(tiny_model_path, FakeEngine())
    first, second = train(data, 2)
    assert set(first.timings) == {"sync", "rollout", "reward", "pi_gen"}  # this step's batch, generated here
    assert set(second.timings) == {  # generated in the background during the update of step 0, joined here
        "wait",
        "pi_gen",
        "background/rollout",
        "background/sleep",
        "background/reward",
        "sync",
        "rollout",
    }
    data.teardown("fit")


def test_a_checkpoint_taken_while_a_rollout_is_generated_holds_it(tiny_model_path):
    states = {}
    for overlap in (False, True):
        data = data_module(tiny_model_path, FakeEngine(), overlap=overlap)
        train(data, 2)
        update_started(data.engine, 1)  # the rollout in the background ends (as it would during step 1's update)
        states[overlap] = data.state_dict()
        assert data.ahead is None
    (sequential,), (overlapped,) = states[False]["in_flight"], states[True]["in_flight"]
    assert overlapped["policy_version"] == sequential["policy_version"] == 1
    for name in ("input_ids", "rollout_logprobs", "rewards", "generation_logprobs"):
        assert torch.equal(overlapped[name], sequential[name]), name


def test_an_error_in_the_background_is_raised_at_the_join_with_its_traceback(tiny_model_path):
    data = data_module(tiny_model_path, FakeEngine(fail_at=2))
    with pytest.raises(OSError, match="the engine failed at step 2") as raised:
        train(data, 3)  # step 2's batch is generated during step 1's update and joined by step 2's rollout
    assert data.trainer.global_step == 2
    frames = [frame.name for frame in traceback.extract_tb(raised.value.__traceback__)]
    assert frames[-1] == "generate" and "_generate" in frames and "rollout" in frames  # the thread's frames kept
    assert "raised in the thread 'rollout-ahead-1'" in raised.value.__notes__[0]
    assert data.ahead is None  # raised once: teardown does not raise it again
    data.teardown("fit")


def test_an_error_of_the_last_rollout_is_raised_at_teardown(tiny_model_path):
    data = data_module(tiny_model_path, FakeEngine(fail_at=2))
    train(data, 2)  # the last update generated the batch of step 2, which fails
    with pytest.raises(OSError, match="the engine failed at step 2"):
        data.teardown("fit")
    assert not data.engine.running  # closed all the same


def test_a_failed_run_waits_for_the_rollout_in_the_background_without_raising_its_error(tiny_model_path):
    data = data_module(tiny_model_path, FakeEngine())
    windows = iter(data.train_dataloader())
    data.rollout(next(windows))
    update_started(data.engine, 0)
    data.trainer.global_step = 1
    data.rollout(next(windows))  # the batch of step 2, generating until the update of step 1 starts
    job = data.ahead.job
    threading.Timer(0.05, update_started, (data.engine, 1)).start()
    data.on_exception(KeyboardInterrupt())
    assert job.done and data.ahead is None


def test_overlap_without_staleness_names_the_fix():
    with pytest.raises(ValueError, match=r"overlap: true with max_staleness: 0.* set max_staleness >= 1"):
        RolloutDataModule(ReasoningGymPrompts(["chain_sum"], size=8, seed=3), engine=FakeEngine(), overlap=True)


def test_overlap_with_engines_shared_by_processes_names_the_fix(tiny_model_path):
    engine = FakeEngine()
    engine.tensor_parallel_size = 2
    data = RolloutDataModule(
        ReasoningGymPrompts(["chain_sum"], size=8, seed=3), engine=engine, model_path=tiny_model_path, max_staleness=1
    )
    data.trainer = SimpleNamespace(global_rank=0, local_rank=0, world_size=2, num_devices=2)
    with pytest.raises(ValueError, match=r"data.overlap with 2 processes sharing each engine .* data.overlap: false"):
        data.setup("fit")


def test_without_generation_logprobs_no_weights_are_copied_and_no_pi_gen_is_kept(tiny_model_path):
    data = data_module(tiny_model_path, FakeEngine(), generation_logprobs=False)
    data.trainer.lightning_module.weight_snapshot = None  # a copy would fail
    batches = train(data, 3)
    assert all(b.generation_logprobs is None for b in batches) and "pi_gen" not in batches[2].timings
    data.teardown("fit")


def test_a_weight_snapshot_runs_the_module_with_the_weights_it_kept():
    torch.manual_seed(0)
    layer = nn.Linear(3, 2)
    x = torch.randn(4, 3)
    before = layer(x).detach()
    snapshot = WeightSnapshot(layer)
    weight = layer.weight
    with torch.no_grad():
        layer.weight.add_(1.0)
    after = layer(x).detach()
    with snapshot.loaded(layer):
        assert torch.equal(layer(x), before)
    assert torch.equal(layer(x).detach(), after) and layer.weight is weight  # its own weights back, same objects
