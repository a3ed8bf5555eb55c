"""MathVerifier: exact rewards on hand-picked answers, hangs, dead workers and bad input.

Starting a pool takes seconds, so the tests share module-scoped verifiers.
"""

import multiprocessing as mp
import os
import signal
import threading
import time

import pytest
import torch

from stable_rl.data.verifier import MathVerifier, last_boxed

HANG = r"\boxed{10^{10^{10}}}"  # sympy would compute 10^(10^10) digits

CASES = [  # (response, gold answer, reward)
    (r"The answer is \boxed{42}.", "42", 1.0),
    (r"$x = \boxed{-4}$", "-4", 1.0),
    (r"\boxed{\frac{1}{2}}", "0.5", 1.0),
    (r"\boxed{0.75}", "3/4", 1.0),
    (r"\boxed{\frac{\sqrt{4}}{\left(2\right)}}", "1", 1.0),  # nested braces
    (r"first \boxed{12}, then \boxed{13}", "13", 1.0),  # the last box wins
    (r"first \boxed{13}, then \boxed{12}", "13", 0.0),
    (r"\boxed{43}", "42", 0.0),
    (r"\boxed{-4}", "4", 0.0),
    ("So the answer is 42.", "42", 0.0),  # no box
    ("", "42", 0.0),
    (r"\boxed{}", "42", 0.0),
    (r"\boxed{42", "42", 0.0),  # unclosed
    ("\x00\ud800💥∞ \\boxed{∞", "42", 0.0),  # odd unicode, lone surrogate
    ("}{" * 50_000, "42", 0.0),  # 100k characters, unbalanced braces
    ("x" * 100_000 + r"\boxed{42}", "42", 1.0),
    (r"\boxed{４２}", "42", 1.0),  # look-alike characters read as the plain ones: full-width digits,
    (r"\boxed{٤٢}", "42", 1.0),  # Arabic-Indic digits,
    ("\\boxed{4\u200b2}", "42", 1.0),  # a zero-width space,
    (r"\boxed{－４}", "-4", 1.0),  # a full-width minus sign,
    (r"\boxed{４２}", "４３", 0.0),  # on both sides
    (r"\boxed{10²}", "102", 0.0),  # a superscript is no digit
]


@pytest.fixture(scope="module")
def verifier():
    with MathVerifier(num_workers=2, timeout=2.0) as v:
        yield v


@pytest.mark.parametrize(("response", "answer", "reward"), CASES)
def test_reward(verifier, response, answer, reward):
    assert verifier([response], [answer]).tolist() == [reward]


def test_batch_keeps_order_across_chunks(verifier):
    responses, answers, expected = zip(*(CASES * 5), strict=True)
    rewards = verifier(list(responses), list(answers))
    assert rewards.dtype == torch.float32
    assert rewards.tolist() == list(expected)


def test_without_box_uses_the_last_answer(verifier, monkeypatch):
    monkeypatch.setattr(verifier, "require_boxed", False)  # read per call: no new pool needed
    rewards = verifier(["First 12, so the answer is 42.", "42, no wait: 41", r"\boxed{42}"], ["42"] * 3)
    assert rewards.tolist() == [1.0, 0.0, 1.0]


def test_hanging_answer_times_out_and_the_verifier_keeps_working(verifier):
    start = time.monotonic()
    rewards, timed_out = verifier.score([HANG, r"\boxed{1}", "}{"], ["1", "1", "1"])
    elapsed = time.monotonic() - start
    assert rewards.tolist() == [0.0, 1.0, 0.0]
    assert timed_out.tolist() == [True, False, False]  # counted in train/verifier_timeouts
    assert elapsed < verifier.timeout + 10, f"hanging item took {elapsed:.1f} s"
    assert verifier([r"\boxed{7}"], ["7"]).tolist() == [1.0]


def test_stuck_workers_are_killed_and_replaced(verifier):
    """Workers frozen mid-item (SIGSTOP: no timer can fire in them) stand for a hang in C code."""
    assert verifier([r"\boxed{1}"], ["1"]).tolist() == [1.0]  # the pool is up
    workers = mp.active_children()

    def freeze() -> None:
        for worker in workers:
            os.kill(worker.pid, signal.SIGSTOP)

    threading.Timer(0.5, freeze).start()  # HANG runs for timeout = 2 s unless frozen
    start = time.monotonic()
    rewards, timed_out = verifier.score([HANG, r"\boxed{2}"], ["1", "2"])
    elapsed = time.monotonic() - start
    assert rewards.tolist() == [0.0, 1.0]
    assert timed_out.tolist() == [True, False]  # the item in flight in the killed pool
    assert not any(worker.is_alive() for worker in workers)
    assert elapsed < verifier.timeout + 10, f"stuck workers held the call for {elapsed:.1f} s"
    assert verifier([r"\boxed{3}"], ["3"]).tolist() == [1.0]  # on a new pool


def test_mismatched_lengths_raise(verifier):
    with pytest.raises(ValueError, match="got 2 responses but 1 answers"):
        verifier(["a", "b"], ["1"])


def test_empty_batch():
    with MathVerifier() as v:
        assert v([], []).shape == (0,)
        assert v._pool is None  # no workers started for nothing


@pytest.mark.parametrize(
    ("text", "content"),
    [
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\boxed{1} and \boxed{{2}}", "{2}"),
        (r"\boxed{1} \boxed{2", None),
        ("no box", None),
    ],
)
def test_last_boxed(text, content):
    assert last_boxed(text) == content
