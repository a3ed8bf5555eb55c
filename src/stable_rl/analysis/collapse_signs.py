"""The signs of collapse a run raised. ``InstabilityMonitor`` logs ``train/instability/<sign>`` (1.0) at each
global step a sign holds; a monitor with ``stop: true`` ends the run at the first."""

PREFIX = "train/instability/"
EXPLAINED = (
    "Runs in which `InstabilityMonitor` raised a sign of collapse (`train/instability/<sign>`): the first one, "
    "and the run's last logged step (a monitor with `stop: true` ends the run at its first sign)."
)


def first_sign(series: dict[str, list[tuple[int, float]]]) -> tuple[int, str] | None:
    """(global step, sign) of the first sign of collapse in a run's metric series; None if none was raised."""
    signs = [
        (points[0][0], name.removeprefix(PREFIX))
        for name, points in series.items()
        if name.startswith(PREFIX) and points
    ]
    return min(signs) if signs else None


def last_logged_step(series: dict[str, list[tuple[int, float]]]) -> int:
    """The last global step at which a run logged any metric."""
    return max(step for points in series.values() for step, _ in points)


def signs_table(runs: dict[str, dict[str, list[tuple[int, float]]]]) -> str:
    """A markdown table of each run's first sign of collapse (runs without one left out; empty if none)."""
    rows = []
    for run, series in runs.items():
        sign = first_sign(series)
        if sign is not None:
            rows.append(f"| {run} | {sign[1]} | {sign[0]} | {last_logged_step(series)} |")
    header = ["| run | first sign | at step | last step logged |", "|---|---|---|---|"]
    return "\n".join(header + rows) if rows else ""
