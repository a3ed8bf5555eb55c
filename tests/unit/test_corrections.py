"""The training-inference corrections peers offer (masked and sequence-level IS, IcePop, GSPO, DPPO) against
references written token by token from their papers' formulas (each objective's module docstring), in float64:
the loss and its gradient, with masks and truncation firing."""

import math

import pytest
import torch
from test_objectives import M, make_case, vectorised

from stable_rl.objectives import DPPO, GSPO, IcePop, LossInputs, MaskedIS, SequenceIS

CLOSE = {"rtol": 1e-12, "atol": 1e-12}


def adv_of(rewards, std):
    centered = rewards - rewards.mean(-1, keepdim=True)
    return (centered / (rewards.std(-1, keepdim=True) + 1e-6) if std else centered).reshape(-1)


def clipped_out(r, a, eps_low=0.2, eps_high=0.27):
    """MiniRL's decoupled clipping mask M_t = 0 (paper Eq. 7)."""
    return (a > 0 and r > 1 + eps_high) or (a < 0 and r < 1 - eps_low)


def run_reference(logits, gather, per_response):
    """-(sum over responses of ``per_response(logp, i)``) with autograd through ``logp``."""
    logits = logits.clone().requires_grad_(True)
    logp = gather(logits)
    loss = -sum(per_response(logp, i) for i in range(M))
    return logits, logp, loss


def finish(logits, loss, normalizer):
    loss = loss / normalizer
    loss.backward()
    return loss.detach(), logits.grad


def reference_masked_is(logits, gather, old, mu, mask, rewards, cap, lower, is_cap):
    """-(1/M) sum_i sum_t M_t sg[min(pi/pi_old * w 1(lower <= w <= cap), C)] A_i log pi, w = pi_old/mu_old."""
    adv = adv_of(rewards, std=False)

    def response(logp, i):
        total = 0.0
        for t in range(int(mask[i].sum())):
            w, r = math.exp(old[i, t] - mu[i, t]), math.exp((logp[i, t] - old[i, t]).item())
            if lower <= w <= cap and not clipped_out(r, adv[i]):
                total = total + min(r * w, is_cap) * adv[i] * logp[i, t]
        return total

    logits, _, loss = run_reference(logits, gather, response)
    return finish(logits, loss, M)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(
    ("cap", "lower", "is_cap"), [(2.0, 0.0, 5.0), (2.0, 0.5, 5.0), (5.0, 0.2, 5.0), (2.0, 0.0, 2.0)]
)
def test_masked_is_matches_its_reference(seed, cap, lower, is_cap):
    logits, gather, old, mu, mask, rewards = make_case(seed)
    objective = MaskedIS(cap=cap, lower=lower, is_cap=is_cap)
    loss, grad, out = vectorised(objective, logits, gather, old, mu, mask, rewards)
    ref_loss, ref_grad = reference_masked_is(logits, gather, old, mu, mask, rewards, cap, lower, is_cap)
    torch.testing.assert_close(loss, ref_loss, **CLOSE)
    torch.testing.assert_close(grad, ref_grad, **CLOSE)
    assert 0 < out.token_metrics["is_masked"][mask].sum() < mask.sum()  # some tokens dropped, not all
    assert out.token_metrics["clip_fraction"][mask].sum() > 0
    if is_cap < 2:  # off-policy the staleness can push a kept weight past C: truncated, as MiniRL's
        assert out.token_metrics["is_truncated"][mask].sum() > 0


def test_masked_is_hand_worked_numbers():
    """On-policy, one response of three tokens, A = +0.5: w = 4 (dropped above 2), 1.5 (kept), 0.25 (dropped
    below 0.5): only the middle token's -(1.5 * 0.5 * log pi) remains."""
    logprobs = torch.tensor([[math.log(0.4), math.log(0.3), math.log(0.1)]], requires_grad=True)
    mu = torch.tensor([[math.log(0.1), math.log(0.2), math.log(0.4)]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    out = MaskedIS(cap=2.0, lower=0.5)(LossInputs(logprobs, logprobs.detach(), mu, torch.tensor([0.5]), mask))
    torch.testing.assert_close(out.token_loss.detach(), torch.tensor([[0.0, -(1.5 * 0.5 * math.log(0.3)), 0.0]]))
    torch.testing.assert_close(out.token_metrics["is_masked"], torch.tensor([[1.0, 0.0, 1.0]]))
    out.token_loss.sum().backward()
    torch.testing.assert_close(logprobs.grad, torch.tensor([[0.0, -0.75, 0.0]]))


def reference_sequence_is(logits, gather, old, mu, mask, rewards, mode, geometric, cap, lower):
    """-(1/M) sum_i sum_t M_t sg[min(pi/pi_old c_i, 5)] A_i log pi; c_i from W_i = prod (or geometric mean) of
    pi_old/mu_old."""
    adv = adv_of(rewards, std=False)

    def response(logp, i):
        n = int(mask[i].sum())
        log_w = sum(float(old[i, t] - mu[i, t]) for t in range(n))
        weight = math.exp(log_w / n if geometric else log_w)
        c = min(weight, cap) if mode == "truncate" else (weight if lower <= weight <= cap else 0.0)
        total = 0.0
        for t in range(n):
            r = math.exp((logp[i, t] - old[i, t]).item())
            if not clipped_out(r, adv[i]):
                total = total + min(r * c, 5.0) * adv[i] * logp[i, t]
        return total

    logits, _, loss = run_reference(logits, gather, response)
    return finish(logits, loss, M)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(
    ("mode", "geometric", "cap", "lower", "spread"),
    [
        ("truncate", False, 2.0, 0.0, 0.35),
        ("mask", False, 2.0, 0.5, 0.35),
        ("truncate", True, 1.2, 0.0, 0.45),
        ("mask", True, 1.3, 0.8, 0.45),
    ],
    ids=["product-truncate", "product-mask", "geometric-truncate", "geometric-mask"],
)
def test_sequence_is_matches_its_reference(seed, mode, geometric, cap, lower, spread):
    logits, gather, old, mu, mask, rewards = make_case(seed, spread)
    objective = SequenceIS(mode=mode, geometric=geometric, cap=cap, lower=lower)
    loss, grad, out = vectorised(objective, logits, gather, old, mu, mask, rewards)
    ref_loss, ref_grad = reference_sequence_is(logits, gather, old, mu, mask, rewards, mode, geometric, cap, lower)
    torch.testing.assert_close(loss, ref_loss, **CLOSE)
    torch.testing.assert_close(grad, ref_grad, **CLOSE)
    altered = out.sequence_metrics["seq_is_truncated" if mode == "truncate" else "seq_is_masked"]
    assert 0 < altered.sum() < M  # some responses truncated or dropped, not all


def reference_icepop(logits, gather, old, mu, mask, rewards, alpha, beta):
    """-(1/sum|y_i|) sum_i sum_t M(k) min(r A_i, clip(r) A_i), k = pi_old/mu_old, M(k) = k inside [alpha, beta]."""
    adv = adv_of(rewards, std=True)

    def response(logp, i):
        total = 0.0
        for t in range(int(mask[i].sum())):
            k = math.exp(old[i, t] - mu[i, t])
            r = (logp[i, t] - old[i, t]).exp()
            if alpha <= k <= beta:
                total = total + k * torch.minimum(r * adv[i], r.clamp(0.8, 1.27) * adv[i])
        return total

    logits, _, loss = run_reference(logits, gather, response)
    return finish(logits, loss, int(mask.sum()))


@pytest.mark.parametrize("seed", range(4))
def test_icepop_matches_its_reference(seed):
    logits, gather, old, mu, mask, rewards = make_case(seed)
    loss, grad, out = vectorised(IcePop(), logits, gather, old, mu, mask, rewards)
    ref_loss, ref_grad = reference_icepop(logits, gather, old, mu, mask, rewards, 0.5, 5.0)
    torch.testing.assert_close(loss, ref_loss, **CLOSE)
    torch.testing.assert_close(grad, ref_grad, **CLOSE)
    assert 0 < out.token_metrics["icepop_masked"][mask].sum() < mask.sum()
    assert out.token_metrics["clip_fraction"][mask].sum() > 0


def reference_gspo(logits, gather, old, mask, advantages, eps_low, eps_high, token_level):
    """GSPO: -(1/M) sum_i min(s_i A_i, clip(s_i) A_i), s_i = exp(mean_t log pi/pi_old); GSPO-token:
    -(1/M) sum_i (1/|y_i|) sum_t min(s_it A_it, clip(s_it) A_it), s_it = sg[s_i] pi(y_t)/sg[pi(y_t)]."""

    def response(logp, i):
        n = int(mask[i].sum())
        s = (sum(logp[i, t] - old[i, t] for t in range(n)) / n).exp()
        if not token_level:
            return torch.minimum(s * advantages[i], s.clamp(1 - eps_low, 1 + eps_high) * advantages[i])
        total = 0.0
        for t in range(n):
            s_t = s.detach() * (logp[i, t] - logp[i, t].detach()).exp()
            a = advantages[i, t] if advantages.dim() == 2 else advantages[i]
            total = total + torch.minimum(s_t * a, s_t.clamp(1 - eps_low, 1 + eps_high) * a) / n
        return total

    logits, _, loss = run_reference(logits, gather, response)
    return finish(logits, loss, M)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("token_level", [False, True], ids=["gspo", "gspo-token"])
def test_gspo_matches_its_reference(seed, token_level):
    logits, gather, old, mu, mask, rewards = make_case(seed, spread=0.003)  # |log s_i| ~ 1e-3: some clipped
    loss, grad, out = vectorised(GSPO(token_level=token_level), logits, gather, old, mu, mask, rewards)
    ref_loss, ref_grad = reference_gspo(logits, gather, old, mask, adv_of(rewards, True), 3e-4, 4e-4, token_level)
    torch.testing.assert_close(loss, ref_loss, **CLOSE)
    torch.testing.assert_close(grad, ref_grad, **CLOSE)
    assert 0 < out.sequence_metrics["seq_clip_fraction"].sum() < M


@pytest.mark.parametrize("seed", range(3))
def test_gspo_token_takes_an_advantage_per_token(seed):
    """With advantages [M, T] GSPO-token follows its reference; GSPO refuses them (one advantage per response)."""
    logits, gather, old, mu, mask, _ = make_case(seed, spread=0.003)
    advantages = torch.randn(M, mask.shape[1], generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    leaf = logits.clone().requires_grad_(True)
    objective = GSPO(token_level=True)
    out = objective(LossInputs(gather(leaf), old, mu, advantages, mask))
    loss = out.token_loss.sum() / objective.normalizer(mask)
    loss.backward()
    ref_loss, ref_grad = reference_gspo(logits, gather, old, mask, advantages, 3e-4, 4e-4, token_level=True)
    torch.testing.assert_close(loss.detach(), ref_loss, **CLOSE)
    torch.testing.assert_close(leaf.grad, ref_grad, **CLOSE)
    with pytest.raises(ValueError, match="one advantage per response"):
        GSPO()(LossInputs(gather(logits), old, mu, advantages, mask))


def binary_divergence_reference(p, q, divergence):
    if divergence == "binary_tv":
        return abs(p - q)
    return q * math.log(q / p) + (1 - q) * math.log((1 - q) / (1 - p))


def reference_dppo(logits, gather, old, mu, mask, rewards, divergence, delta, cap, anchor):
    """-(1/M) sum_i sum_t M_t sg[min(pi/mu_old, C)] A_i log pi; M_t = 0 where the binary divergence from the anchor
    exceeds delta and the token's probability moved the advantage's way."""
    adv = adv_of(rewards, std=True)
    anchors = mu if anchor == "rollout" else old

    def response(logp, i):
        total = 0.0
        for t in range(int(mask[i].sum())):
            p, q = math.exp(logp[i, t].item()), math.exp(anchors[i, t])
            beyond = binary_divergence_reference(p, q, divergence) > delta
            if beyond and ((adv[i] > 0 and p > q) or (adv[i] < 0 and p < q)):
                continue
            total = total + min(math.exp((logp[i, t] - mu[i, t]).item()), cap) * adv[i] * logp[i, t]
        return total

    logits, _, loss = run_reference(logits, gather, response)
    return finish(logits, loss, M)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(
    ("divergence", "delta", "cap", "anchor", "spread"),
    [
        ("binary_tv", 0.15, 20.0, "rollout", 1.0),
        ("binary_kl", 0.05, 20.0, "rollout", 1.0),
        ("binary_tv", 0.1, 2.0, "old", 3.0),
    ],
    ids=["tv", "kl", "tv-old-anchor-cap-2"],
)
def test_dppo_matches_its_reference(seed, divergence, delta, cap, anchor, spread):
    logits, gather, old, mu, mask, rewards = make_case(seed, spread)
    objective = DPPO(divergence=divergence, delta=delta, is_cap=cap, anchor=anchor)
    loss, grad, out = vectorised(objective, logits, gather, old, mu, mask, rewards)
    ref_loss, ref_grad = reference_dppo(logits, gather, old, mu, mask, rewards, divergence, delta, cap, anchor)
    torch.testing.assert_close(loss, ref_loss, **CLOSE)
    torch.testing.assert_close(grad, ref_grad, **CLOSE)
    masked = out.token_metrics["dppo_masked"][mask]
    assert 0 < masked.sum() < mask.sum()
    if cap == 2.0:
        assert out.token_metrics["is_truncated"][mask].sum() > 0


def test_dppo_defaults_are_the_papers():
    assert (DPPO().delta, DPPO(divergence="binary_kl").delta, DPPO().is_cap, DPPO().anchor) == (
        0.15,
        0.05,
        20.0,
        "rollout",
    )


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: MaskedIS(cap=0.9), r"MaskedIS lower=0.0, cap=0.9: .* 0 <= lower <= 1 <= cap"),
        (lambda: MaskedIS(cap=3.0, is_cap=2.0), r"MaskedIS is_cap=2.0 < cap=3.0"),
        (lambda: SequenceIS(cap=6.0), r"SequenceIS is_cap=5.0 < cap=6.0"),
        (lambda: SequenceIS(mode="mask", lower=1.5, cap=3.0), r"SequenceIS lower=1.5"),
        (lambda: SequenceIS(lower=0.5), r"lower=0.5 with mode 'truncate'"),
        (lambda: SequenceIS(mode="clip"), r"mode='clip'"),
        (lambda: IcePop(alpha=2.0, beta=1.5), r"IcePop alpha=2.0, beta=1.5"),
        (lambda: DPPO(divergence="tv"), r"divergence='tv'"),
        (lambda: DPPO(anchor="mu"), r"anchor='mu'"),
        (lambda: DPPO(delta=0.0), r"delta=0.0"),
    ],
)
def test_settings_without_meaning_are_refused(build, message):
    with pytest.raises(ValueError, match=message):
        build()
