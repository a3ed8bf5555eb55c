"""The atlas's verdicts (PROTOCOL.md Part 2) from ``logs/atlas/*.tar.xz``, written to ``atlas/``: ``cells.md`` (the
cell table), ``tests.md`` (every test, raw and adjusted p), ``findings.md`` (F1-F8), ``atlas.png`` and
``curves/<cell>.png``. ``python experiments/atlas/analysis.py`` runs it where atlas archives exist, with the seeds per
cell committed in ``pilot/power.md``.
"""

import re
from pathlib import Path

from experiments.atlas.endpoints import CellResult, cell_result, cell_table, read_copies
from experiments.atlas.findings import CORE_LEVELS, Key, decided_levels, findings, key_of, tests_table
from experiments.atlas.plan import FIRST_SEED, LEVELS, Cell, cells
from experiments.atlas.verdict_figures import atlas_figure, curves_figure

NOTES = """
Read with them (Part 2): the exact control's cell gates every verdict, and a finding is judged only where every
cell it reads is complete. "Not detected" means not detected at this n, this task, this model and H. L6 and L7 are
weight-noise levels beyond any real engine's mismatch, and L7 is also a worse sampler (Part 1b: its step-0 held-out
below half of L0's). Survival: the permutation log-rank test of the pooled runs; beside it, the test that swaps arms
only within a seed, and where a run was cut twice, the p that counts the cut as a collapse. Held-out: the paired
t-test of d_s over seeds; beside it, the exact sign-flip test.
"""


def seeds_rule(power_md: str) -> tuple[int, dict[int, str]]:
    """n and the least power against a 2x ratio at n from ``pilot/power.md`` (``analysis.power_table``), by Holm
    family size: one comparison (level 0.05: the first shape's row at n), two (Holm's halved level, its last line)."""
    found = re.search(r"Seeds per cell with a verdict: (\d+)", power_md)
    if found is None:
        raise ValueError("pilot/power.md names no seeds per cell: commit it (Part 2a) before reading atlas logs")
    n = int(found.group(1))
    rows = [line.split(" | ") for line in power_md.splitlines() if line.startswith("| k = ")]
    powers = [float(row[2]) for row in rows if row[0] == rows[0][0] and int(row[1]) == n]
    if not powers:
        raise ValueError(f"pilot/power.md gives no power at its n = {n}: remake it (analysis.power_table)")
    power = {1: f"power {powers[0]:.2f} against a 2x ratio at n = {n}"}
    if halved := re.search(
        r"Holm's halved level \(0\.025, the families of two\) \d+ seeds have power ([\d.]+)", power_md
    ):
        power[2] = f"power {float(halved.group(1)):.2f} against a 2x ratio at n = {n}, Holm's halved level"
    return n, power


def every_cell(seeds: int) -> list[Cell]:
    """Every cell Part 2 might run, whatever L* and L_M turn out to be."""
    every = {c.run_name(FIRST_SEED): c for star in LEVELS for m in (None, *LEVELS) for c in cells(seeds, star, m)}
    return list(every.values())


def levels_line(levels: tuple[str, bool, str | None] | None, core: dict[Key, CellResult]) -> str:
    if levels is None:
        done = sum(core[lv, arm].complete for lv in CORE_LEVELS for arm in ((), ("minirl_no_is",)))
        return f"L* and L_M: not decided (the core matrix has {done} of 14 cells complete); stage 3 on is not listed."
    l_star, forced, l_m = levels
    collapsed = any(r.collapses_or_tied for key, r in core.items() if key[0] != "L0")
    why = "the lowest collapsing level is L2 or below" if collapsed else "no core cell collapses"
    star = f"L* = {l_star} (reported so: {why})" if forced else f"L* = {l_star}"
    bias = f"; comparisons of the core matrix's cells at {l_star} carry a selection bias towards separation"
    return f"{star}; L_M = {l_m or 'none (MiniRL collapses at no level)'}{bias}."


def write_verdicts(archives: list[Path], out: Path, seeds: int, power: dict[int, str]) -> list[Path]:
    """Write the verdicts of ``archives`` under ``out``; returns the files written."""
    copies = read_copies(archives, every_cell(seeds))
    core = {key_of(r): r for r in (cell_result(c, copies) for c in cells(seeds))}
    levels = decided_levels(core)
    plan = cells(seeds, levels[0], levels[2]) if levels else cells(seeds)
    results = {key_of(r): r for r in (cell_result(c, copies) for c in plan)}
    lines, tests = findings(results, power)
    head = f"Seeds per cell with a verdict: n = {seeds} (pilot/power.md). {levels_line(levels, core)}\n\n"
    written = {
        out / "cells.md": "# The atlas's cells (PROTOCOL.md Part 2)\n\n" + head + cell_table(list(results.values())),
        out / "tests.md": "# The atlas's tests (PROTOCOL.md Part 2)\n\n" + head + tests_table(tests, results),
        out / "findings.md": "# The atlas's findings (PROTOCOL.md Part 2)\n\n" + head + "\n".join(lines) + "\n" + NOTES,
    }
    (out / "curves").mkdir(parents=True, exist_ok=True)
    for path, text in written.items():
        path.write_text(text)
    figures = [out / "atlas.png"]
    atlas_figure(list(results.values()), figures[0])
    for result in results.values():
        if result.runs:
            figures.append(out / "curves" / f"{result.cell.run_name(FIRST_SEED).removesuffix(f'-s{FIRST_SEED}')}.png")
            curves_figure(result, figures[-1])
    return [*written, *figures]
