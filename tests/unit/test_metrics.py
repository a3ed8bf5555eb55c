"""pass@k and avg@k against hand-computed values."""

import math
from unittest.mock import patch

import pytest
import torch

from stable_rl.metrics import AvgAtK, PassAtK, pass_at_k, token_kl
from stable_rl.rl import PolicyModule
from stable_rl.rollout import EvalBatch


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


def test_validation_logs_avg_and_pass_at_k_of_fixed_generations(tiny_model_path):
    """PolicyModule's validation on fixed verifier results: 2 batches of one benchmark, n = 4."""
    module = PolicyModule(tiny_model_path)
    logged = {}
    with patch.object(PolicyModule, "log", lambda self, name, value, **kw: logged.__setitem__(name, value.item())):
        module.validation_step(EvalBatch(torch.tensor([[1.0, 0, 0, 0], [1, 1, 1, 1]]), "heldout"), 0)
        module.validation_step(EvalBatch(torch.tensor([[0.0, 0, 0, 0]]), "heldout", verifier_timeouts=3), 1)
        module.validation_step(EvalBatch(torch.tensor([[1.0, 1, 0, 0]]), "asdiv"), 0)
        module.on_validation_epoch_end()
    assert logged == pytest.approx(
        {
            "val/heldout/avg@4": (0.25 + 1 + 0) / 3,
            "val/heldout/pass@1": (0.25 + 1 + 0) / 3,
            "val/heldout/pass@2": (0.5 + 1 + 0) / 3,
            "val/heldout/pass@4": (1 + 1 + 0) / 3,
            "val/asdiv/avg@4": 0.5,
            "val/asdiv/pass@1": 0.5,
            "val/asdiv/pass@2": 5 / 6,
            "val/asdiv/pass@4": 1.0,
            "val/heldout/problems": 3,  # what was evaluated, logged with every validation
            "val/asdiv/problems": 1,
            "val/heldout/verifier_timeouts": 3,  # samples scored 0 after the verifier's timeout
            "val/asdiv/verifier_timeouts": 0,
        }
    )
    assert module.eval_metrics == {}  # the next validation starts afresh


def test_token_kl_is_k3_by_hand():
    """r - 1 - log r with r = pi / mu: 0 where they agree, 0.5 - 1 + ln 2 = 0.19315 where pi = mu / 2."""
    mu = torch.tensor([0.5, 0.5, 0.2]).log()
    pi = torch.tensor([0.5, 0.25, 0.4]).log()
    expected = torch.tensor([0.0, 0.5 - 1 + math.log(2), 2.0 - 1 - math.log(2)])
    torch.testing.assert_close(token_kl(mu, pi), expected)
