"""Is the training reward rising? The least-squares slope of ``train/reward`` per global step, with its standard
error, over a run's steps.

Where a run makes at most one pass over its prompt pool (the long task's fixed-rate runs: 36 steps x 16 prompts
of a 2,048-problem pool), every step's prompts are new to the policy, so its training reward is a fresh
estimate of the policy's reward at that step, from G samples of each prompt, and the slope uses all of them.
The standard error is the ordinary least-squares one (steps independent given the trend); a description, not
a verdict: the rule fixed before the runs is the held-out one (``stable_rl.analysis.heldout_change``)."""

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class RewardTrend:
    run: str
    steps: int  # finite rewards fitted
    first_step: int
    last_step: int
    slope: float  # reward per global step; NaN without two distinct steps
    standard_error: float  # of the slope; NaN with fewer than 3 steps

    @property
    def change(self) -> float:
        """The fitted change from the first step to the last."""
        return self.slope * (self.last_step - self.first_step)


def reward_trend(run: str, points: list[tuple[int, float]]) -> RewardTrend:
    """The least-squares line through ``points`` [(step, reward)], non-finite rewards left out: its slope and
    the slope's standard error."""
    points = [(step, reward) for step, reward in points if math.isfinite(reward)]
    n = len(points)
    first, last = (points[0][0], points[-1][0]) if points else (0, 0)
    mean_step = sum(step for step, _ in points) / n if n else math.nan
    spread = sum((step - mean_step) ** 2 for step, _ in points)
    if n < 2 or spread == 0:
        return RewardTrend(run, n, first, last, math.nan, math.nan)
    mean_reward = sum(reward for _, reward in points) / n
    slope = sum((step - mean_step) * (reward - mean_reward) for step, reward in points) / spread
    if n < 3:
        return RewardTrend(run, n, first, last, slope, math.nan)
    residual = sum((reward - mean_reward - slope * (step - mean_step)) ** 2 for step, reward in points) / (n - 2)
    return RewardTrend(run, n, first, last, slope, math.sqrt(residual / spread))


def trend_table(trends: list[RewardTrend]) -> str:
    lines = [
        "| run | steps | slope per step | standard error | fitted change, first to last step | slope / SE |",
        "|---|---|---|---|---|---|",
    ]
    for t in trends:
        error = f"{t.standard_error:.3g}" if math.isfinite(t.standard_error) else "-"
        ratio = f"{t.slope / t.standard_error:+.2f}" if math.isfinite(t.standard_error) and t.standard_error else "-"
        lines.append(f"| {t.run} | {t.steps} | {t.slope:+.3g} | {error} | {t.change:+.3g} | {ratio} |")
    return "\n".join(lines)
