"""Held-out outcomes problem by problem (stable_rl.analysis.heldout_pairs): avg@n after n updates, paired
differences."""

import pytest

from stable_rl.analysis.heldout_pairs import after, avg_at, outcomes_of, paired_difference


def rows(step, correct, eval_set="heldout"):
    return [
        {"step": str(step), "eval_set": eval_set, "problem": str(p), "correct": str(c), "samples": "4"}
        for p, c in enumerate(correct)
    ]


def test_the_last_validation_at_or_before_n_updates():
    outcomes = outcomes_of(rows(0, [0, 1, 2]) + rows(100, [4, 3, 2]) + rows(100, [0, 0, 0], "other") + rows(200, [1]))
    assert after(outcomes, 199) == (100, {0: 1.0, 1: 0.75, 2: 0.5})
    assert after(outcomes, 0) == (0, {0: 0.0, 1: 0.25, 2: 0.5})
    assert avg_at(after(outcomes, 150)[1]) == pytest.approx(0.75)
    assert after(outcomes_of(rows(64, [1])), 63) is None


def test_a_paired_difference_is_the_mean_over_problems_of_a_less_b():
    """(4 - 1) / 4, (3 - 3) / 4, (2 - 4) / 4: mean (0.75 + 0 - 0.5) / 3 = 1/12."""
    a, b = outcomes_of(rows(900, [4, 3, 2]))[900], outcomes_of(rows(900, [1, 3, 4]))[900]
    assert paired_difference(a, b) == pytest.approx(1 / 12)
    with pytest.raises(ValueError, match="different problems"):
        paired_difference(a, {0: 1.0})
