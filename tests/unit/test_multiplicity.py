"""Holm within a level and a fixed sequence across levels (stable_rl.analysis.multiplicity), by hand."""

import math

from stable_rl.analysis.multiplicity import fixed_sequence, holm_adjusted


def test_holm_multiplies_the_ith_smallest_by_m_minus_i_plus_one_and_keeps_the_order():
    """0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 = 0.04, raised to the 0.06 before it."""
    assert holm_adjusted([0.01, 0.04, 0.03]) == [0.03, 0.06, 0.06]
    assert holm_adjusted([0.02, 0.03]) == [0.04, 0.04]
    assert holm_adjusted([0.6, 0.9]) == [1.0, 1.0]
    assert holm_adjusted([0.2]) == [0.2]


def test_a_test_that_could_not_be_made_counts_in_m_and_stays_nan():
    adjusted = holm_adjusted([math.nan, 0.01])
    assert adjusted[1] == 0.02 and math.isnan(adjusted[0])


def test_the_sequence_stops_at_the_first_level_not_reproduced_and_lists_later_findings_apart():
    verdicts = [("L7", "reproduced"), ("L6", "reproduced"), ("L5", "not detected"), ("L4", "not detected")]
    verdicts += [("L3", "reproduced"), ("L2", "reversed"), ("L1", "not detected")]
    assert fixed_sequence(verdicts) == (
        ["L7", "L6"],
        ("L5", "not detected"),
        [("L3", "reproduced"), ("L2", "reversed")],
    )
    assert fixed_sequence([("L3", "reproduced"), ("L2", "reproduced")]) == (["L3", "L2"], None, [])
    assert fixed_sequence([("L3", "reversed"), ("L2", "reproduced")]) == (
        [],
        ("L3", "reversed"),
        [("L2", "reproduced")],
    )
