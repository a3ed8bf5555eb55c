"""Held-out outcomes problem by problem (stable_rl.analysis.heldout_pairs): avg@n at each validation, paired
differences."""

import pytest

from stable_rl.analysis.heldout_pairs import avg_at, outcomes_of, paired_difference


def rows(step, correct, eval_set="heldout"):
    return [
        {"step": str(step), "eval_set": eval_set, "problem": str(p), "correct": str(c), "samples": "4"}
        for p, c in enumerate(correct)
    ]


def test_each_validation_of_the_eval_set_problem_by_problem():
    outcomes = outcomes_of(rows(0, [0, 1, 2]) + rows(100, [4, 3, 2]) + rows(100, [0, 0, 0], "other") + rows(200, [1]))
    assert outcomes == {0: {0: 0.0, 1: 0.25, 2: 0.5}, 100: {0: 1.0, 1: 0.75, 2: 0.5}, 200: {0: 0.25}}
    assert avg_at(outcomes[100]) == pytest.approx(0.75)


def test_a_paired_difference_is_the_mean_over_problems_of_a_less_b():
    """(4 - 1) / 4, (3 - 3) / 4, (2 - 4) / 4: mean (0.75 + 0 - 0.5) / 3 = 1/12."""
    a, b = outcomes_of(rows(900, [4, 3, 2]))[900], outcomes_of(rows(900, [1, 3, 4]))[900]
    assert paired_difference(a, b) == pytest.approx(1 / 12)
    with pytest.raises(ValueError, match="different problems"):
        paired_difference(a, {0: 1.0})
