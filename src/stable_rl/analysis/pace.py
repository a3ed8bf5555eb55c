"""How fast did each run go? The median (and range) of its logged phase times per global step (``stable_rl.timing``):
the whole step, its rollout and its update, in seconds. A description for planning runs, measured on whatever
shared the machine; speed comparisons belong in ``benchmarks/``."""

import math
import statistics

PHASES = ("time/step", "time/rollout", "time/update")


def pace_row(run: str, series: dict[str, list[tuple[int, float]]]) -> str | None:
    """One markdown row: per phase, ``median (min-max)`` over the run's finite values and their count; None
    where the run logged no phase time."""
    cells = [_cell([value for _, value in series.get(phase, []) if math.isfinite(value)]) for phase in PHASES]
    return None if cells == ["-"] * len(PHASES) else f"| {run} | {' | '.join(cells)} |"


def _cell(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f}), n = {len(values)}"


def pace_table(runs: dict[str, dict[str, list[tuple[int, float]]]]) -> str:
    """Markdown: a row per run that logged phase times (empty string where none did)."""
    rows = [row for run, series in runs.items() if (row := pace_row(run, series))]
    if not rows:
        return ""
    header = "| run | " + " | ".join(f"{phase} s, median (range)" for phase in PHASES) + " |"
    return "\n".join([header, "|---" * (len(PHASES) + 1) + "|", *rows])
