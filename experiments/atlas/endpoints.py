"""Each atlas run's endpoints and each cell's table row (PROTOCOL.md Part 2, "Endpoints"), from the runs' metrics.csv
and heldout_outcomes.csv in ``logs/atlas/*.tar.xz``.

Time to collapse is Part 1's rule in updates: off-policy, a logged row is a rollout of N updates at time
N (step + 1) - 1 and the 20-row windows become ceil(20 / N) rows (three skipped rows in a row stay the skip sign).
Held-out after n updates is the last validation at or before n (heldout_outcomes.csv counts updates). A run cut
before H is used once it was run again and cut again (censored where it stopped, out of the held-out test).
"""

import math
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from experiments.atlas.plan import FIRST_SEED, REPORTED_ARMS, Cell
from stable_rl.analysis.heldout_change import HeldoutChange
from stable_rl.analysis.heldout_pairs import avg_at, outcomes_of
from stable_rl.analysis.run_logs import archived_copies, read_archive, series_of
from stable_rl.analysis.survival import Survival, collapse_time, median_time

SIGNS = ("train/reward", "train/entropy", "train/skipped_updates")  # what the collapse rule reads
NAMES = {
    "minirl_no_is": "w/o train-infer IS",
    "minirl_length_norm": "w/ length-norm",
    "grpo": "GRPO",
    "cispo": "CISPO",
    "dppo_tv": "DPPO-TV",
    "dppo_kl": "DPPO-KL",
    "cold_start_a": "cold start a",
    "cold_start_b": "cold start b",
}
MODES = {"noclip": "no clip", "r2": "clip + R2", "r3": "clip + R3"}  # off-policy; no overlay: clip


@dataclass(frozen=True)
class Run:
    seed: int
    survival: Survival  # in updates: collapsed, or censored at H - 1 (or where a cut run stopped)
    cut: bool  # stopped before H
    heldout: dict[int, float]  # updates -> held-out avg@4, at each validation
    final: dict[int, float] | None  # problem -> share correct, the last validation at or before H (None: cut)
    curves: dict[str, list[tuple[int, float]]]  # train/reward, train/entropy at each row's last update


def read_run(metrics: list[dict[str, str]], outcomes: list[dict[str, str]], cell: Cell, seed: int) -> Run:
    """One run's endpoints from its metrics.csv and heldout_outcomes.csv rows."""
    n, name = cell.updates_per_row, cell.run_name(seed)
    series = series_of(({k: row.get(k, "") for k in ("step", *SIGNS)} for row in metrics), name)
    timed = {metric: [(n * (step + 1) - 1, v) for step, v in points] for metric, points in series.items()}
    survival = collapse_time(timed, horizon=cell.horizon - 1, window=math.ceil(20 / n))
    cut = max(t for t, _ in timed["train/reward"]) < cell.horizon - 1
    validations = outcomes_of(outcomes)
    if not validations:
        raise ValueError(f"{name}: no held-out outcomes (heldout_outcomes.csv): the run's log is incomplete")
    if not cut and cell.horizon not in validations:
        raise ValueError(
            f"{name}: ran to H = {cell.horizon} but has no validation after {cell.horizon} updates (last: "
            f"{max(validations)}): its heldout_outcomes.csv is incomplete (PROTOCOL Part 2c)"
        )
    final = None if cut else validations[cell.horizon]
    heldout = {step: avg_at(problems) for step, problems in sorted(validations.items())}
    curves = {m: timed[m] for m in SIGNS[:2] if m in timed}
    return Run(seed, survival, cut, heldout, final, curves)


def read_copies(archives: list[Path], cells: list[Cell]) -> dict[str, list[Run]]:
    """Run name -> its archived copies in archive order, for the runs of ``cells``."""
    by_name = {c.run_name(s): (c, s) for c in cells for s in range(FIRST_SEED, FIRST_SEED + c.seeds)}
    outcomes = {archive: read_archive(archive, "heldout_outcomes.csv") for archive in archives}
    copies: dict[str, list[Run]] = {}
    for archive, name, rows in archived_copies(archives):
        if name in by_name:
            copies.setdefault(name, []).append(read_run(rows, outcomes[archive].get(name, []), *by_name[name]))
    return copies


def heldout_after(run: Run, updates: int) -> float:
    """The held-out avg@4 of the last validation at or before ``updates``."""
    return run.heldout[max(step for step in run.heldout if step <= updates)]


@dataclass(frozen=True)
class CellResult:
    cell: Cell
    runs: list[Run]  # its seeds done, in seed order: one copy each

    @property
    def complete(self) -> bool:
        return len(self.runs) == self.cell.seeds

    @property
    def quorum(self) -> int:
        return math.ceil(self.cell.seeds / 2)

    def seed_holds(self, run: Run) -> bool:
        """No collapse before H, and held-out after H above step 0's by the bounded two-standard-error margin."""
        if run.survival.collapsed or run.final is None:
            return False
        change = HeldoutChange("", "", 0, heldout_after(run, 0), self.cell.horizon, avg_at(run.final), len(run.final))
        return change.verdict == "learned"

    @property
    def holding(self) -> int:
        return sum(self.seed_holds(run) for run in self.runs)

    @property
    def collapsing(self) -> int:
        return sum(run.survival.collapsed for run in self.runs)

    @property
    def tied(self) -> bool:
        """Half the seeds hold and half collapse (n even): shown as "holds and collapses", and in a verdict's
        conditions neither; where a condition picks a level or a test (L*, L_M, F7's test) it collapses (Part 2c)."""
        return self.complete and min(self.holding, self.collapsing) >= self.quorum

    @property
    def holds(self) -> bool:
        return self.complete and self.holding >= self.quorum and not self.tied

    @property
    def collapses(self) -> bool:
        return self.complete and self.collapsing >= self.quorum and not self.tied

    @property
    def collapses_or_tied(self) -> bool:
        return self.collapses or self.tied


def cell_result(cell: Cell, copies: dict[str, list[Run]]) -> CellResult:
    """A seed is done where a copy reached H (the first such), or where it was cut twice (the later copy)."""
    runs = []
    for seed in range(FIRST_SEED, FIRST_SEED + cell.seeds):
        found = copies.get(cell.run_name(seed), [])
        whole = [run for run in found if not run.cut]
        if whole or len(found) >= 2:
            runs.append(whole[0] if whole else found[-1])
    return CellResult(cell, runs)


def has_verdict(cell: Cell) -> bool:
    return not any(o.removesuffix(".yaml") in REPORTED_ARMS for o in cell.overlays)


def method_of(cell: Cell) -> str:
    stems = [Path(o).stem for o in cell.overlays]
    if cell.updates_per_row > 1:
        return f"N = {cell.updates_per_row}, {MODES.get(stems[-1], 'clip')}"
    if stems and Path(cell.overlays[0]).parent.name == "staleness":  # Part 3: k rollouts in flight
        return f"{NAMES.get(stems[1], stems[1]) if stems[1:] else 'MiniRL'}, k = {stems[0][1:]}"
    return NAMES.get(stems[0], stems[0]) if stems else "MiniRL"


def verdict_of(result: CellResult) -> str:
    """holds / collapses (at >= ceil(n/2) seeds each; both where n/2 do each) / neither; or how far it has run."""
    if not result.runs:
        return "not run"
    if not result.complete:
        return f"{len(result.runs)} of {result.cell.seeds}"
    if not has_verdict(result.cell):
        return "reported without a verdict"
    if result.tied:
        return "holds and collapses"
    return "holds" if result.holds else "collapses" if result.collapses else "neither"


def cell_row(result: CellResult) -> str:
    cell, runs = result.cell, result.runs
    name = cell.run_name(FIRST_SEED).removesuffix(f"-s{FIRST_SEED}")
    signs = Counter(run.survival.sign for run in runs if run.survival.collapsed)
    collapses = f"{result.collapsing}" + (
        f" ({', '.join(f'{s} {k}' for s, k in sorted(signs.items()))})" if signs else ""
    )
    if cuts := sum(run.cut for run in runs):
        collapses += f"; {cuts} cut"
    median = median_time([run.survival for run in runs]) if runs else math.nan
    median_text = "—" if math.isnan(median) else f"> {cell.horizon}" if math.isinf(median) else f"{median:g}"
    ends = [avg_at(run.final) for run in runs if run.final is not None]
    heldout = f"{statistics.fmean(ends):.3f}" if ends else "—"
    if len(ends) > 1:
        heldout += f" (SD {statistics.stdev(ends):.3f})"
    holding = f"{result.holding}" if runs else "—"
    return (
        f"| {name} | {cell.level} | {method_of(cell)} | {len(runs)} / {cell.seeds} | {collapses if runs else '—'} | "
        f"{median_text} | {heldout} | {holding} | {verdict_of(result)} |"
    )


def cell_table(results: list[CellResult]) -> str:
    """PROTOCOL.md Part 2's cells in run order: seeds run, collapses (the signs that fired), the Kaplan-Meier median
    time to collapse in updates, held-out avg@4 after H over seeds, the seeds that hold, the cell's verdict."""
    lines = [
        "| cell | level | method | seeds run | collapses (sign) | median time to collapse | held-out after H, "
        "mean (SD) | seeds that hold | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    return "\n".join(lines + [cell_row(result) for result in results]) + "\n"
