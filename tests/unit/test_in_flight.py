"""InFlight: the rollouts a pipelined run (data.max_staleness >= 1) holds between generation and training."""

import pytest
import torch
from test_module import fixed_batch

from stable_rl.rl.in_flight import InFlight


def test_the_window_is_generated_whole_at_the_start_then_one_batch_ahead():
    queue = InFlight(max_staleness=2)
    assert list(queue.missing()) == [0, 1, 2]
    queue.batches.extend(fixed_batch(vocab=64, version=v) for v in (0, 0))
    assert list(queue.missing()) == [2]
    assert list(InFlight(max_staleness=0).missing()) == [0]


def test_rollouts_in_flight_come_back_from_a_checkpoint_as_they_were():
    queue = InFlight(max_staleness=1)
    batch = fixed_batch(vocab=64, version=4)
    batch.generation_logprobs = torch.rand(batch.input_ids.shape)
    queue.batches.append(batch)
    resumed = InFlight(max_staleness=1)
    resumed.load_state_dict(queue.state_dict())
    (back,) = resumed.batches
    assert back.policy_version == 4 and back.group_size == batch.group_size and back.temperature == 1.0
    for name in ("input_ids", "response_mask", "rollout_logprobs", "rewards", "generation_logprobs", "row_index"):
        assert torch.equal(getattr(back, name), getattr(batch, name)), name
    assert InFlight(max_staleness=0).state_dict() == {}  # a synchronous run's checkpoint is unchanged


def test_more_rollouts_in_flight_than_the_run_allows_names_the_fix():
    queue = InFlight(max_staleness=2)
    queue.batches.extend(fixed_batch(vocab=64, version=v) for v in (3, 4))
    with pytest.raises(ValueError, match=r"holds 2 rollouts in flight, .* resume with data.max_staleness=2 or more"):
        InFlight(max_staleness=1).load_state_dict(queue.state_dict())
