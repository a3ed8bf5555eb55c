"""The mismatch dial (``stable_rl.rollout.weight_noise``): each synced weight times (1 + sigma * eps), the noise
seeded by (engine seed, version, weight name), checked against the formula drawn independently."""

import zlib

import pytest
import torch

from stable_rl.rollout import HFEngine
from stable_rl.rollout.weight_noise import check_weight_noise, noise_seed, perturbed


def reference(name: str, weight: torch.Tensor, sigma: float, seed: int, version: int) -> torch.Tensor:
    """W * (1 + sigma * eps), eps from torch.randn of a CPU generator seeded as the docstring says."""
    base = ((seed * 1_000_003 + version) * 1_000_003 + zlib.crc32(name.encode())) % (2**63 - 1)
    eps = torch.randn(weight.shape, generator=torch.Generator().manual_seed(base))
    return weight * (1 + sigma * eps)


def test_each_floating_weight_gets_its_own_seeded_relative_noise():
    weights = [("a.weight", torch.randn(3, 4)), ("b.bias", torch.randn(4)), ("steps", torch.arange(3))]
    out = dict(perturbed(weights, 0.05, seed=7, version=2))
    for name, weight in weights[:2]:
        torch.testing.assert_close(out[name], reference(name, weight, 0.05, 7, 2), rtol=0, atol=0)
    assert out["steps"] is weights[2][1]  # integer tensors pass unchanged
    again = dict(perturbed(reversed(weights), 0.05, seed=7, version=2))  # order does not matter
    assert all(torch.equal(again[name], out[name]) for name in out)
    later = dict(perturbed(weights, 0.05, seed=7, version=3))  # fresh noise at the next sync
    assert not torch.equal(later["a.weight"], out["a.weight"])
    assert noise_seed(7, 2, "a.weight") != noise_seed(7, 2, "b.bias") != noise_seed(8, 2, "b.bias")


def test_a_bfloat16_weight_is_perturbed_in_float32_then_rounded():
    weight = torch.randn(8, 8).to(torch.bfloat16)
    ((_, out),) = perturbed([("w", weight)], 0.1, seed=0, version=0)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, reference("w", weight.float(), 0.1, 0, 0).to(torch.bfloat16), rtol=0, atol=0)


@pytest.mark.parametrize("sigma", [-0.1, float("nan"), float("inf")])
def test_a_noise_without_meaning_is_refused(sigma):
    with pytest.raises(ValueError, match=r"weight_noise=.*finite number >= 0"):
        check_weight_noise(sigma)


def test_the_engine_holds_the_perturbed_weights_and_the_policy_keeps_its_own(tiny_model, tiny_model_path):
    """HFEngine with weight_noise 0.01, seed 3: after a sync of step 5 its model's weights are the formula's, the
    policy's are untouched; a second sync of the same step keeps them, the next step draws new noise."""
    engine = HFEngine(seed=3, weight_noise=0.01)
    engine.start(tiny_model_path, max_model_len=64)
    policy = {name: weight.clone() for name, weight in tiny_model.state_dict().items()}
    engine.sync(tiny_model.state_dict().items(), version=5)
    held = engine.model.state_dict()
    for name, weight in policy.items():
        torch.testing.assert_close(held[name], reference(name, weight, 0.01, 3, 5), rtol=0, atol=0)
        assert torch.equal(tiny_model.state_dict()[name], weight)
    engine.sync(tiny_model.state_dict().items(), version=6)
    name = "model.embed_tokens.weight"
    torch.testing.assert_close(
        engine.model.state_dict()[name], reference(name, policy[name], 0.01, 3, 6), rtol=0, atol=0
    )
    engine.close()
