"""Objectives against references written token by token from the paper's formulas (arXiv 2512.01374;
the objectives table of docs/method.md).

Log-probs come from ``log_softmax`` of leaf logits, so each check compares both the loss and its
gradient (autograd of the reference vs autograd of the vectorised implementation).
"""

import math

import pytest
import torch

from stable_rl.objectives import (
    CISPO,
    DPPO,
    GRPO,
    GSPO,
    DrGRPO,
    IcePop,
    LossInputs,
    MaskedIS,
    MiniRL,
    SequenceIS,
    group_advantages,
)

M, T, V = 6, 7, 5  # responses, positions, vocabulary


def make_case(seed: int, spread: float = 1.0):
    """Random logits for pi_theta, perturbed pi_old and mu_old, sampled tokens, ragged mask."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(M, T, V, generator=g, dtype=torch.float64)
    tokens = torch.randint(0, V, (M, T), generator=g)
    old_logits = logits + spread * 0.3 * torch.randn(M, T, V, generator=g, dtype=torch.float64)
    mu_logits = old_logits + spread * 1.5 * torch.randn(M, T, V, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, T + 1, (M,), generator=g)
    mask = torch.arange(T)[None, :] < lengths[:, None]
    rewards = torch.randint(0, 2, (M // 3, 3), generator=g).to(torch.float64)

    def gather(lg):
        return lg.log_softmax(-1).gather(-1, tokens[..., None])[..., 0]

    return logits, gather, gather(old_logits), gather(mu_logits), mask, rewards


def vectorised(objective, logits, gather, old, mu, mask, rewards):
    logits = logits.clone().requires_grad_(True)
    adv = objective.advantages(rewards).reshape(-1)
    out = objective(LossInputs(gather(logits), old, mu, adv, mask))
    loss = out.token_loss.sum() / objective.normalizer(mask)
    loss.backward()
    return loss.detach(), logits.grad, out


def reference_minirl(logits, gather, old, mu, mask, rewards, cap, eps_low, eps_high, clip, length_norm, use_is):
    """-(1/M) sum_i [1/|y_i|] sum_t M_t sg[min(pi/mu, C)] A_i log pi, one token at a time."""
    logits = logits.clone().requires_grad_(True)
    logp = gather(logits)
    adv = (rewards - rewards.mean(-1, keepdim=True)).reshape(-1)
    total = 0.0
    for i in range(M):
        n_i = int(mask[i].sum())
        for t in range(n_i):
            pi, pi_old, pi_mu = logp[i, t].exp(), old[i, t].exp(), mu[i, t].exp()
            weight = min((pi / pi_mu).item(), cap) if use_is else 1.0
            r = (pi / pi_old).item()
            masked = clip and ((adv[i] > 0 and r > 1 + eps_high) or (adv[i] < 0 and r < 1 - eps_low))
            if masked:
                continue
            term = weight * adv[i] * logp[i, t]
            total = total + (term / n_i if length_norm else term)
    loss = -total / M
    loss.backward()
    return loss.detach(), logits.grad


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(
    "flags",
    [
        dict(clip=True, length_norm=False, use_is=True),
        dict(clip=False, length_norm=False, use_is=True),
        dict(clip=True, length_norm=True, use_is=True),
        dict(clip=True, length_norm=False, use_is=False),
    ],
    ids=["minirl", "no-clip", "length-norm", "no-is"],
)
def test_minirl_matches_token_by_token_reference(seed, flags):
    logits, gather, old, mu, mask, rewards = make_case(seed)
    objective = MiniRL(clip=flags["clip"], length_norm=flags["length_norm"], train_infer_is=flags["use_is"])
    loss, grad, out = vectorised(objective, logits, gather, old, mu, mask, rewards)
    ref_loss, ref_grad = reference_minirl(logits, gather, old, mu, mask, rewards, 5.0, 0.2, 0.27, **flags)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-12, atol=1e-12)
    # the cases exercise what they claim to: some weights truncated, some tokens clipped
    assert out.token_metrics["is_truncated"][mask].sum() > 0  # logged even when the ablation drops the weight
    if flags["clip"]:
        assert out.token_metrics["clip_fraction"][mask].sum() > 0


@pytest.mark.parametrize("seed", range(3))
def test_on_policy_minirl_is_truncated_is_reinforce(seed):
    """N = 1: pi_theta = pi_old, so M_t = 1 and the weight is min(pi_old/mu_old, 5)."""
    logits, gather, _, mu, mask, rewards = make_case(seed)
    old = gather(logits)  # on-policy: the target equals pi_old
    loss, grad, out = vectorised(MiniRL(), logits, gather, old, mu, mask, rewards)
    assert out.token_metrics["clip_fraction"].sum() == 0

    leaf = logits.clone().requires_grad_(True)
    adv = (rewards - rewards.mean(-1, keepdim=True)).reshape(-1, 1)
    weight = (old - mu).exp().clamp(max=5.0)
    reinforce = -(weight * adv * gather(leaf) * mask).sum() / M
    reinforce.backward()
    torch.testing.assert_close(loss, reinforce.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, leaf.grad, rtol=1e-12, atol=1e-12)


def test_minirl_gradient_is_gradient_of_token_level_surrogate():
    """Where no weight is truncated, grad of Eq. 7 == grad of J_tok = sum_t pi_theta/mu_old * A."""
    logits, gather, _, mu, mask, rewards = make_case(7, spread=0.05)
    old = gather(logits)
    _, grad, _ = vectorised(MiniRL(is_cap=1e9), logits, gather, old, mu, mask, rewards)

    leaf = logits.clone().requires_grad_(True)
    adv = (rewards - rewards.mean(-1, keepdim=True)).reshape(-1, 1)
    j_tok = ((gather(leaf) - mu).exp() * adv * mask).sum() / M  # no stop-gradient anywhere
    (-j_tok).backward()
    torch.testing.assert_close(grad, leaf.grad, rtol=1e-12, atol=1e-12)


def test_minirl_hand_worked_numbers():
    """One response of two tokens, A = +0.5 (rewards 1, 0 -> the first response)."""
    logprobs = torch.tensor([[math.log(0.5), math.log(0.2)]], requires_grad=True)
    old = torch.tensor([[math.log(0.5), math.log(0.1)]])  # r = 1.0, 2.0 -> token 2 clipped (A > 0)
    mu = torch.tensor([[math.log(0.05), math.log(0.2)]])  # pi/mu = 10 -> truncated to 5; 1.0
    mask = torch.tensor([[True, True]])
    out = MiniRL()(LossInputs(logprobs, old, mu, torch.tensor([0.5]), mask))
    # token 1: -(5 * 0.5 * log 0.5); token 2 masked out
    expected = torch.tensor([[-(5 * 0.5 * math.log(0.5)), 0.0]])
    torch.testing.assert_close(out.token_loss.detach(), expected)
    torch.testing.assert_close(out.token_metrics["is_weight"], torch.tensor([[5.0, 1.0]]))
    torch.testing.assert_close(out.token_metrics["is_truncated"], torch.tensor([[1.0, 0.0]]))
    torch.testing.assert_close(out.token_metrics["clip_fraction"], torch.tensor([[0.0, 1.0]]))
    out.token_loss.sum().backward()
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-2.5, 0.0]]))


def reference_grpo(logits, gather, old, mask, rewards, eps_low, eps_high):
    logits = logits.clone().requires_grad_(True)
    logp = gather(logits)
    adv = ((rewards - rewards.mean(-1, keepdim=True)) / (rewards.std(-1, keepdim=True) + 1e-6)).reshape(-1)
    total = 0.0
    for i in range(M):
        n_i = int(mask[i].sum())
        for t in range(n_i):
            r = (logp[i, t] - old[i, t]).exp()
            total = total + torch.minimum(r * adv[i], r.clamp(1 - eps_low, 1 + eps_high) * adv[i]) / n_i
    loss = -total / M
    loss.backward()
    return loss.detach(), logits.grad


def reference_cispo(logits, gather, old, mask, rewards, eps_low, eps_high):
    logits = logits.clone().requires_grad_(True)
    logp = gather(logits)
    adv = ((rewards - rewards.mean(-1, keepdim=True)) / (rewards.std(-1, keepdim=True) + 1e-6)).reshape(-1)
    total, n_tokens = 0.0, int(mask.sum())
    for i in range(M):
        for t in range(int(mask[i].sum())):
            weight = min(max((logp[i, t] - old[i, t]).exp().item(), 1 - eps_low), 1 + eps_high)
            total = total + weight * adv[i] * logp[i, t]
    loss = -total / n_tokens
    loss.backward()
    return loss.detach(), logits.grad


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("objective", "reference"), [(GRPO(), reference_grpo), (CISPO(), reference_cispo)])
def test_baselines_match_reference(seed, objective, reference):
    logits, gather, old, mu, mask, rewards = make_case(seed)
    loss, grad, out = vectorised(objective, logits, gather, old, mu, mask, rewards)
    ref_loss, ref_grad = reference(logits, gather, old, mask, rewards, 0.2, 0.27)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-12, atol=1e-12)
    assert out.token_metrics["clip_fraction"][mask].sum() > 0


def reference_drgrpo(logits, gather, old, mask, rewards, eps_low, eps_high, max_tokens):
    """-(1 / (M L_max)) sum_i sum_t min(r A_i, clip(r) A_i), A_i = R_i - group mean, one token at a time."""
    logits = logits.clone().requires_grad_(True)
    logp = gather(logits)
    adv = (rewards - rewards.mean(-1, keepdim=True)).reshape(-1)  # no std division
    total = 0.0
    for i in range(M):
        for t in range(int(mask[i].sum())):  # no 1/|y_i|
            r = (logp[i, t] - old[i, t]).exp()
            total = total + torch.minimum(r * adv[i], r.clamp(1 - eps_low, 1 + eps_high) * adv[i])
    loss = -total / (M * max_tokens)
    loss.backward()
    return loss.detach(), logits.grad


@pytest.mark.parametrize("seed", range(4))
def test_drgrpo_matches_reference_with_a_constant_denominator(seed):
    logits, gather, old, mu, mask, rewards = make_case(seed)
    objective = DrGRPO(max_response_tokens=16)
    loss, grad, out = vectorised(objective, logits, gather, old, mu, mask, rewards)
    ref_loss, ref_grad = reference_drgrpo(logits, gather, old, mask, rewards, 0.2, 0.27, 16)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-12, atol=1e-12)
    assert out.token_metrics["clip_fraction"][mask].sum() > 0
    shorter = mask.clone()
    shorter[:, -1] = False  # other lengths, the same denominator
    assert objective.normalizer(shorter) == objective.normalizer(mask) == M * 16


def test_drgrpo_without_a_generation_budget_is_refused():
    with pytest.raises(ValueError, match=r"max_response_tokens=0: set it to the engine's max_new_tokens"):
        DrGRPO(max_response_tokens=0)


@pytest.mark.parametrize(
    "objective",
    [
        *(MiniRL(), MiniRL(length_norm=True), GRPO(), CISPO(), DrGRPO(max_response_tokens=T + 3), MaskedIS()),
        *(SequenceIS(geometric=True), SequenceIS(mode="mask"), IcePop(), GSPO(), GSPO(token_level=True), DPPO()),
    ],
    ids=[
        *("minirl", "length-norm", "grpo", "cispo", "drgrpo", "masked-is"),
        *("geometric-sequence-is", "masked-sequence-is", "icepop", "gspo", "gspo-token", "dppo"),
    ],
)
def test_micro_batch_split_does_not_change_the_gradient(objective):
    """Summing micro-batch losses, each over the mini-batch's one normaliser, equals the whole."""
    logits, gather, old, mu, mask, rewards = make_case(11)
    _, whole_grad, _ = vectorised(objective, logits, gather, old, mu, mask, rewards)
    leaf = logits.clone().requires_grad_(True)
    adv = objective.advantages(rewards).reshape(-1)
    normalizer = objective.normalizer(mask)
    for rows in (slice(0, 1), slice(1, 4), slice(4, M)):
        out = objective(LossInputs(gather(leaf)[rows], old[rows], mu[rows], adv[rows], mask[rows]))
        (out.token_loss.sum() / normalizer).backward()
    torch.testing.assert_close(leaf.grad, whole_grad, rtol=1e-12, atol=1e-12)


def test_group_advantages_hand_worked():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
    torch.testing.assert_close(
        group_advantages(rewards), torch.tensor([[0.5, -0.5, -0.5, 0.5], [0.25, 0.25, 0.25, -0.75]])
    )
    std = math.sqrt(1 / 3)  # unbiased std of (1, 0, 0, 1)
    torch.testing.assert_close(
        group_advantages(rewards[:1], std_normalize=True),
        torch.tensor([[0.5, -0.5, -0.5, 0.5]]) / (std + 1e-6),
    )


def test_group_of_one_is_rejected_with_the_fix():
    with pytest.raises(ValueError, match=r"group_size >= 2"):
        group_advantages(torch.ones(3, 1))


CLIP_OWNERS = [
    MiniRL,
    GRPO,
    CISPO,
    lambda **kw: DrGRPO(max_response_tokens=8, **kw),
    GSPO,
    IcePop,
    MaskedIS,
    SequenceIS,
]
CLIP_IDS = ["minirl", "grpo", "cispo", "drgrpo", "gspo", "icepop", "masked-is", "sequence-is"]


@pytest.mark.parametrize("build", CLIP_OWNERS, ids=CLIP_IDS)
@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"eps_low": 1.2}, r"^model\.init_args\.objective\.init_args\.eps_low=1\.2: .* must be in \[0, 1\)$"),
        ({"eps_low": 1.0}, r"^model\.init_args\.objective\.init_args\.eps_low=1\.0: .* must be in \[0, 1\)$"),
        ({"eps_low": -0.1}, r"^model\.init_args\.objective\.init_args\.eps_low=-0\.1: .* must be in \[0, 1\)$"),
        ({"eps_high": -0.2}, r"^model\.init_args\.objective\.init_args\.eps_high=-0\.2: .* must be >= 0$"),
        ({"eps_high": math.nan}, r"^model\.init_args\.objective\.init_args\.eps_high=nan: .* must be >= 0$"),
    ],
    ids=["eps-low-above-1", "eps-low-1", "eps-low-negative", "eps-high-negative", "eps-high-nan"],
)
def test_a_clip_range_outside_its_meaning_is_refused_with_the_setting_named(build, setting, message):
    with pytest.raises(ValueError, match=message):
        build(**setting)


@pytest.mark.parametrize("build", [MiniRL, DPPO], ids=["minirl", "dppo"])
@pytest.mark.parametrize("is_cap", [0.0, -5.0])
def test_an_is_cap_of_zero_or_less_is_refused_at_start_not_by_a_math_domain_error(build, is_cap):
    with pytest.raises(
        ValueError, match=rf"^model\.init_args\.objective\.init_args\.is_cap={is_cap}: .* must be > 0 \(the paper"
    ):
        build(is_cap=is_cap)


def test_clip_ranges_at_their_limits_are_kept():
    objective = MiniRL(eps_low=0.0, eps_high=0.0, is_cap=1e-3)
    assert (objective.eps_low, objective.eps_high, objective.is_cap) == (0.0, 0.0, 1e-3)
    assert GRPO(eps_low=0.999, eps_high=10.0).eps_low == 0.999
