"""Did a run learn? Its held-out reward at the last validation against the first, judged by a rule fixed
before the runs (experiments/long-task/README.md): "learned" (or "worse") where the change is at least two standard errors
of the difference, bounded over problems.

Each problem's success rate lies in [0, 1], so the mean over P problems of a held-out reward with mean p has
variance at most p (1 - p) / P (Bhatia-Davis), however many samples each problem gets. Two such means over
the same problems, p1 and p2, differ with variance at most (p1 (1 - p1) + p2 (1 - p2)) / P <= 2 p (1 - p) / P,
p their mean (concavity), unless the two are negatively correlated over problems (the same problems under a
policy a few updates apart: assumed not). The margin is two square roots of that bound."""

import math
from dataclasses import dataclass
from fnmatch import fnmatch

HELDOUT = "val/*/avg@*"  # the held-out rewards


def problems_metric(metric: str) -> str:
    """The problem count logged beside a held-out reward: ``val/<set>/avg@<n>`` -> ``val/<set>/problems``."""
    return metric.rsplit("/", 1)[0] + "/problems"


def problem_count(logged: float) -> int:
    """A logged ``val/<set>/problems`` as a count; 0 (no verdict, no band) where it is not finite."""
    return int(logged) if math.isfinite(logged) else 0


def standard_error_bound(p: float, problems: int) -> float:
    """sqrt(p (1 - p) / P): the standard error of a held-out mean p over P problems, at most (Bhatia-Davis); NaN
    where no problem was counted or p is not a rate in [0, 1]."""
    if problems <= 0 or not 0 <= p <= 1:
        return math.nan
    return math.sqrt(p * (1 - p) / problems)


def heldout_band(series: dict[str, list[tuple[int, float]]], metric: str) -> list[tuple[int, float, float]]:
    """(step, low, high) of ``metric`` +- two bounded standard errors at each validation whose problem count
    (``val/<set>/problems``) was logged at the same step: what a figure shades around a held-out curve."""
    counts = dict(series.get(problems_metric(metric), []))
    band = []
    for step, value in series[metric]:
        half = 2 * standard_error_bound(value, problem_count(counts.get(step, 0.0)))
        if not math.isnan(half):
            band.append((step, value - half, value + half))
    return band


@dataclass(frozen=True)
class HeldoutChange:
    run: str
    metric: str  # e.g. val/heldout/avg@2
    first_step: int
    first: float
    last_step: int
    last: float
    problems: int  # counted at the last validation

    @property
    def margin(self) -> float:
        """Two standard errors of the difference, at most (see the module docstring); NaN where no problem
        was counted or a value is not a rate in [0, 1]."""
        return 2 * math.sqrt(2) * standard_error_bound((self.first + self.last) / 2, self.problems)

    @property
    def verdict(self) -> str:
        """A change, not a tie: at p = 0 or 1 the margin is 0, and an unchanged reward did not learn."""
        change, margin = self.last - self.first, self.margin
        if math.isnan(change) or math.isnan(margin):
            return "no verdict"
        if abs(change) < margin or change == 0:
            return "no change"
        return "learned" if change > 0 else "worse"


def heldout_metrics(series: dict[str, list[tuple[int, float]]]) -> list[str]:
    """A run's held-out rewards: ``val/<set>/avg@<n>``."""
    return sorted(m for m in series if fnmatch(m, HELDOUT))


def heldout_changes(runs: dict[str, dict[str, list[tuple[int, float]]]]) -> list[HeldoutChange]:
    """The first-to-last change of every held-out reward validated at least twice with its problem count
    (``val/<set>/problems``) logged, per run."""
    changes = []
    for run, series in runs.items():
        for metric in heldout_metrics(series):
            points, problems = series[metric], series.get(problems_metric(metric))
            if len(points) >= 2 and problems:
                (first_step, first), (last_step, last) = points[0], points[-1]
                changes.append(
                    HeldoutChange(run, metric, first_step, first, last_step, last, problem_count(problems[-1][1]))
                )
    return changes


def not_judged(runs: dict[str, dict[str, list[tuple[int, float]]]], changes: list[HeldoutChange]) -> list[str]:
    """``run (metric)`` of every held-out reward that ``changes`` (``heldout_changes(runs)``) leaves out:
    validated once, or without its problem count (a run stopped before its second validation has no verdict,
    not "no change")."""
    judged = {(c.run, c.metric) for c in changes}
    return [
        f"{run} ({metric})"
        for run, series in runs.items()
        for metric in heldout_metrics(series)
        if (run, metric) not in judged
    ]


def changes_table(changes: list[HeldoutChange]) -> str:
    lines = [
        "| run | metric | first (step) | last (step) | change | margin (2 SE, bound) | problems | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in changes:
        lines.append(
            f"| {c.run} | {c.metric} | {c.first:.4g} ({c.first_step}) | {c.last:.4g} ({c.last_step}) | "
            f"{c.last - c.first:+.4g} | {c.margin:.3g} | {c.problems} | {c.verdict} |"
        )
    return "\n".join(lines)
