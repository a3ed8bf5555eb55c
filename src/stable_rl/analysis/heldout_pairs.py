"""Held-out outcomes problem by problem (``heldout_outcomes.csv``, written by ``stable_rl.callbacks.HeldOutOutcomes``):
a run's avg@n at each validation, and the paired difference of two runs on the same problems (the stability
atlas's d_s, ``experiments/atlas/PROTOCOL.md`` Part 2)."""

import statistics
from collections.abc import Iterable

Outcomes = dict[int, dict[int, float]]  # validation step (optimizer updates) -> problem -> share of samples correct


def outcomes_of(rows: Iterable[dict[str, str]], eval_set: str = "heldout") -> Outcomes:
    """step -> problem -> correct / samples of ``eval_set``, from heldout_outcomes.csv's rows."""
    outcomes: Outcomes = {}
    for row in rows:
        if row["eval_set"] == eval_set:
            outcomes.setdefault(int(row["step"]), {})[int(row["problem"])] = int(row["correct"]) / int(row["samples"])
    return outcomes


def avg_at(problems: dict[int, float]) -> float:
    """avg@n over the problems: the mean of each one's share of correct samples."""
    return statistics.fmean(problems.values())


def paired_difference(a: dict[int, float], b: dict[int, float]) -> float:
    """The mean over the problems of a's share correct less b's (the same problems in both, else an error)."""
    if a.keys() != b.keys():
        raise ValueError(f"paired runs were evaluated on different problems ({len(a)} and {len(b)}): not paired")
    return statistics.fmean(a[problem] - b[problem] for problem in a)
