"""Multiplicity as the stability atlas fixes it (``experiments/atlas/PROTOCOL.md`` Part 2, "Tests"): Holm within one
level of a finding, a fixed sequence of levels across them (each at the full level, stopping at the first level
where the finding is not reproduced), which keeps the family's error at the level without a correction."""

import math


def holm_adjusted(p_values: list[float]) -> list[float]:
    """Holm's adjusted p of each of ``p_values`` (in their order): the i-th smallest p times (m - i + 1), at least
    the adjusted p before it, at most 1; reject where the adjusted p is at most the level. NaN stays NaN (a test
    that could not be made) and counts in m."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: (math.isnan(p_values[i]), p_values[i]))
    adjusted, running = [math.nan] * m, 0.0
    for rank, i in enumerate(order):
        if math.isnan(p_values[i]):
            break
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def fixed_sequence(verdicts: list[tuple[str, str]]) -> tuple[list[str], tuple[str, str] | None, list[tuple[str, str]]]:
    """Read (level, verdict) pairs in the sequence's order: (the levels reproduced before the first that is not,
    that first (level, verdict) or None, the levels after it whose verdict is not "not detected": listed apart)."""
    reached: list[str] = []
    for index, (level, verdict) in enumerate(verdicts):
        if verdict != "reproduced":
            return reached, (level, verdict), [(lv, v) for lv, v in verdicts[index + 1 :] if v != "not detected"]
        reached.append(level)
    return reached, None, []
