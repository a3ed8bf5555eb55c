"""Is the training reward rising? The least-squares slope of ``train/reward`` per global step, with its standard
error, over a run's steps.

Where a run makes at most one pass over its prompt pool (the long task's fixed-rate runs: 36 steps x 16 prompts
of a 2,048-problem pool), every step's prompts are new to the policy, so its training reward is a fresh
estimate of the policy's reward at that step, from G samples of each prompt, and the slope uses all of them.
The standard error is the ordinary least-squares one (steps independent given the trend); a description, not
a verdict: the rule fixed before the runs is the held-out one (``stable_rl.heldout_change``)."""

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class RewardTrend:
    run: str
    steps: int
    slope: float  # reward per global step
    standard_error: float  # of the slope; NaN with fewer than 3 steps

    @property
    def change(self) -> float:
        """The fitted change from the first step to the last."""
        return self.slope * (self.steps - 1)


def reward_trend(run: str, points: list[tuple[int, float]]) -> RewardTrend:
    """The least-squares line through ``points`` [(step, reward)]: slope and its standard error."""
    n = len(points)
    if n < 2:
        return RewardTrend(run, n, math.nan, math.nan)
    mean_step = sum(step for step, _ in points) / n
    mean_reward = sum(reward for _, reward in points) / n
    spread = sum((step - mean_step) ** 2 for step, _ in points)
    slope = sum((step - mean_step) * (reward - mean_reward) for step, reward in points) / spread
    if n < 3:
        return RewardTrend(run, n, slope, math.nan)
    residual = sum((reward - mean_reward - slope * (step - mean_step)) ** 2 for step, reward in points) / (n - 2)
    return RewardTrend(run, n, slope, math.sqrt(residual / spread))


def trend_table(trends: list[RewardTrend]) -> str:
    lines = [
        "| run | steps | slope per step | standard error | fitted change, first to last step | slope / SE |",
        "|---|---|---|---|---|---|",
    ]
    for t in trends:
        known = not math.isnan(t.standard_error)
        error, ratio = (f"{t.standard_error:.3g}", f"{t.slope / t.standard_error:+.2f}") if known else ("-", "-")
        lines.append(f"| {t.run} | {t.steps} | {t.slope:+.3g} | {error} | {t.change:+.3g} | {ratio} |")
    return "\n".join(lines)
