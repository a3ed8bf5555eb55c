import torch

from stable_rl.rollout import RolloutBatch
from stable_rl.rollout.engine import Sample


def batch_of(lengths: list[int]) -> RolloutBatch:
    """One prompt token then a response of each length; token ids and log-probs name their row."""
    samples = [Sample([100 + i], [i] * n, [-float(i)] * n) for i, n in enumerate(lengths)]
    return RolloutBatch.from_samples(samples, torch.zeros(len(lengths)), 1, 0, 1.0, policy_version=0)


def test_length_sorted_parts_group_rows_by_length_and_cut_the_padding():
    batch = batch_of([2, 7, 1, 5, 3])  # rows of 3, 8, 2, 6, 4 tokens
    parts = batch.length_sorted_parts(2)
    assert [index.tolist() for index, _ in parts] == [[1, 3], [4, 0], [2]]
    assert [part.input_ids.shape[1] for _, part in parts] == [8, 4, 2]
    _, part = parts[1]
    assert part.input_ids.tolist() == [[104, 4, 4, 4], [100, 0, 0, 0]]
    assert part.response_mask.tolist() == [[False, True, True, True], [False, True, True, False]]
    assert part.rollout_logprobs.tolist() == [[0, -4, -4, -4], [0, -0.0, -0.0, 0]]
    assert part.row_index.tolist() == [4, 0] and part.rewards.shape == (2,)


def test_length_sorted_parts_keep_ties_in_batch_order():
    parts = batch_of([3, 3, 3]).length_sorted_parts(2)
    assert [index.tolist() for index, _ in parts] == [[0, 1], [2]]
    assert [part.input_ids.shape[1] for _, part in parts] == [4, 4]
    assert batch_of([3, 3, 3]).rows(slice(3, None)).length_sorted_parts(2) == []  # no rows, no parts
