"""pass@k and avg@k against hand-computed values."""

import math

import pytest
import torch

from stable_rl.metrics import AvgAtK, PassAtK, pass_at_k


def test_pass_at_k_hand_computed():
    correct = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]])
    # n = 4; c = 1, 2, 0, 4
    torch.testing.assert_close(pass_at_k(correct, 1), torch.tensor([0.25, 0.5, 0.0, 1.0]))
    expected_2 = [1 - math.comb(3, 2) / math.comb(4, 2), 1 - math.comb(2, 2) / math.comb(4, 2), 0.0, 1.0]
    torch.testing.assert_close(pass_at_k(correct, 2), torch.tensor(expected_2))  # 0.5, 5/6, 0, 1
    torch.testing.assert_close(pass_at_k(correct, 4), torch.tensor([1.0, 1.0, 0.0, 1.0]))


def test_pass_at_k_needs_enough_samples():
    with pytest.raises(ValueError, match=r"pass@5 needs 1 <= k <= n samples per problem, got n=4"):
        pass_at_k(torch.ones(2, 4), 5)


def test_avg_and_pass_at_k_accumulate_over_batches():
    avg, pass2 = AvgAtK(), PassAtK(k=2)
    for batch in (torch.tensor([[1, 0, 0, 0]]), torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0]])):
        avg.update(batch)
        pass2.update(batch)
    assert avg.compute().item() == pytest.approx((0.25 + 0.5 + 0.0) / 3)
    assert pass2.compute().item() == pytest.approx((0.5 + 5 / 6 + 0.0) / 3)
