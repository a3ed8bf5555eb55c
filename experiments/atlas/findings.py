"""The atlas's tests and findings F1-F8, as PROTOCOL.md Parts 2 and 3 fixed them ("Tests", "Findings and verdicts").

Survival: the two-sided permutation log-rank test of two cells' seeds (the within-seed test beside it, and, where a
run was cut, the p that counts the cut as a collapse). Held-out: the paired t-test of d_s (the sign-flip p beside
it). Within a level, a finding's comparisons are Holm-corrected; across levels, a fixed sequence. A finding is
judged only where every cell it reads (the exact control's too: it gates every verdict) is complete.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from experiments.atlas.endpoints import CellResult, heldout_after, method_of
from experiments.atlas.plan import LEVELS
from stable_rl.analysis.heldout_change import HeldoutChange
from stable_rl.analysis.heldout_pairs import paired_difference
from stable_rl.analysis.multiplicity import fixed_sequence, holm_adjusted
from stable_rl.analysis.survival import Survival, logrank_permutation_p, logrank_within_seed_p, logrank_z
from stable_rl.analysis.t_test import paired_t_test, t_interval

ALPHA, BOUND = 0.05, 0.05  # each test's level; F5's equivalence bound on held-out differences
Key = tuple[str, tuple[str, ...]]  # (level, the stems of the cell's overlays)
CONTROL: Key = ("L0", ())
MINIRL, NO_IS, LENGTH_NORM = (), ("minirl_no_is",), ("minirl_length_norm",)
CORE_LEVELS = ("L7", "L6", "L5", "L4", "L3", "L2", "L1")


def key_of(result: CellResult) -> Key:
    return result.cell.level, tuple(Path(o).stem for o in result.cell.overlays)


def rank(level: str) -> int:
    return list(LEVELS).index(level)


def decided_levels(core: dict[Key, CellResult]) -> tuple[str, bool, str | None] | None:
    """(L*, whether L* was set to L3 by the rule, L_M) from the complete core matrix; None while it is not."""
    if not all((lv, arm) in core and core[lv, arm].complete for lv in CORE_LEVELS for arm in (MINIRL, NO_IS)):
        return None
    either = [lv for lv in CORE_LEVELS if core[lv, MINIRL].collapses_or_tied or core[lv, NO_IS].collapses_or_tied]
    lowest = min(either, key=rank, default=None)
    l_m = min((lv for lv in CORE_LEVELS if core[lv, MINIRL].collapses_or_tied), key=rank, default=None)
    forced = lowest is None or rank(lowest) <= rank("L2")
    return ("L3" if forced else lowest), forced, l_m


@dataclass(frozen=True)
class Comparison:
    finding: str
    level: str
    a: Key
    b: Key
    kind: str  # "log-rank" (statistic: Z, positive where a collapses sooner) or "paired t" (mean d_s, a - b)
    statistic: float
    p: float
    adjusted: float = math.nan
    beside: str = ""
    verdict: str = ""


def survival_test(finding: str, level: str, a: CellResult, b: CellResult) -> Comparison:
    sa, sb = [r.survival for r in a.runs], [r.survival for r in b.runs]
    beside = f"within seeds {logrank_within_seed_p(sa, sb):.3g}"
    if any(r.cut and not r.survival.collapsed for r in a.runs + b.runs):  # the sensitivity analysis
        cut_a, cut_b = ([Survival(r.survival.time, True) if r.cut else r.survival for r in c.runs] for c in (a, b))
        beside += f"; cuts as collapses {logrank_permutation_p(cut_a, cut_b):.3g}"
    z, p = logrank_z(sa, sb), logrank_permutation_p(sa, sb)
    return Comparison(finding, level, key_of(a), key_of(b), "log-rank", z, p, beside=beside)


def differences(a: CellResult, b: CellResult) -> list[float]:
    """d_s, a - b, for each seed both ran to H (a cut run's pair leaves the held-out test)."""
    pairs = {r.seed: r.final for r in b.runs if r.final is not None}
    return [paired_difference(r.final, pairs[r.seed]) for r in a.runs if r.final is not None and r.seed in pairs]


def heldout_test(finding: str, level: str, a: CellResult, b: CellResult) -> Comparison:
    d = differences(a, b)
    test = paired_t_test(d)
    beside = f"sign-flip {test.sign_flip_p:.3g} ({len(d)} seeds)"
    return Comparison(finding, level, key_of(a), key_of(b), "paired t", test.mean, test.p, beside=beside)


def judged(test: Comparison, adjusted: float, results: dict[Key, CellResult], finding: "Finding") -> Comparison:
    """For "a is more stable than b" (log-rank) or "a's held-out is higher" (paired t) at the adjusted p."""
    a, b, control = results[test.a], results[test.b], results[CONTROL]
    significant = adjusted <= ALPHA
    if test.kind == "log-rank":
        reversed_ = significant and test.statistic > 0
        reproduced = significant and test.statistic < 0 and b.collapses and a.holds and control.holds
    else:
        reversed_ = (significant and test.statistic < 0) or finding.also_reversed(a, b)
        reproduced = significant and test.statistic > 0 and control.holds and finding.also_required(a, b)
    verdict = "reproduced" if reproduced else "reversed" if reversed_ else "not detected"
    return replace(test, adjusted=adjusted, verdict=verdict)


def never(a: CellResult, b: CellResult) -> bool:
    return False


def always(a: CellResult, b: CellResult) -> bool:
    return True


@dataclass(frozen=True)
class Finding:
    name: str
    claim: str
    comparisons: Callable[[str, dict[Key, CellResult]], list[tuple[Key, Key, str]]]  # level -> (a, b, kind)
    also_required: Callable[[CellResult, CellResult], bool] = always  # held-out: beyond the test (F2: both hold)
    also_reversed: Callable[[CellResult, CellResult], bool] = never  # held-out (F2: b holds where a collapses)
    survival_beside: bool = False  # F4: the log-rank test of the same cells reported beside the held-out test

    def at(self, level: str, results: dict[Key, CellResult]) -> list[Comparison]:
        """This level's tests, Holm-adjusted over them and judged."""
        make = {"log-rank": survival_test, "paired t": heldout_test}
        raw = [make[kind](self.name, level, results[a], results[b]) for a, b, kind in self.comparisons(level, results)]
        if self.survival_beside:
            beside = [survival_test(self.name, level, results[t.a], results[t.b]) for t in raw]
            raw = [
                replace(t, beside=f"{t.beside}; log-rank p {s.p:.3g}, Z = {s.statistic:+.3f}")
                for t, s in zip(raw, beside, strict=True)
            ]
        adjusted = holm_adjusted([t.p for t in raw])
        return [judged(t, p, results, self) for t, p in zip(raw, adjusted, strict=True)]


def off(n: int, mode: str | None = None) -> tuple[str, ...]:
    return (f"n{n}",) + ((mode,) if mode else ())


def best_of(level: str, results: dict[Key, CellResult], other: tuple[str, ...]) -> tuple[Key, Key, str]:
    """F7: MiniRL more stable than ``other``, or, where neither cell collapses, MiniRL's held-out higher."""
    a, b = (level, MINIRL), (level, other)
    return a, b, "log-rank" if any(key in results and results[key].collapses_or_tied for key in (a, b)) else "paired t"


FINDINGS = {
    "F1": Finding(
        "F1",
        "(paper, on-policy) w/o train-infer IS collapses where MiniRL holds",
        lambda lv, r: [((lv, MINIRL), (lv, NO_IS), "log-rank")],
    ),
    "F2": Finding(
        "F2",
        "(paper) w/ length-norm is stable but worse: both hold and MiniRL's held-out is higher",
        lambda lv, r: [((lv, MINIRL), (lv, LENGTH_NORM), "paired t")],
        also_required=lambda a, b: a.holds and b.holds,
        also_reversed=lambda a, b: b.holds and a.collapses,
    ),
    "F3 clip": Finding(
        "F3 clip",
        "(paper, off-policy) without clipping training collapses early: clip more stable than no clip at N = 4 and 16",
        lambda lv, r: [((lv, off(n)), (lv, off(n, "noclip")), "log-rank") for n in (4, 16)],
    ),
    "F3 replay": Finding(
        "F3 replay",
        "(paper, off-policy) without routing replay training collapses early: clip + R3 and clip + R2 each more "
        "stable than clip at N = 4 and 16",
        lambda lv, r: [((lv, off(n, m)), (lv, off(n)), "log-rank") for n in (4, 16) for m in ("r3", "r2")],
    ),
    "F4": Finding(
        "F4",
        "(paper) at N = 4 and 16, R3 better than R2: R3's held-out higher",
        lambda lv, r: [((lv, off(n, "r3")), (lv, off(n, "r2")), "paired t") for n in (4, 16)],
        survival_beside=True,
    ),
    "F6": Finding(
        "F6",
        "(verl's documentation) DPPO holds where MiniRL collapses: DPPO-TV and DPPO-KL each more stable than MiniRL",
        lambda lv, r: [((lv, (dppo,)), (lv, MINIRL), "log-rank") for dppo in ("dppo_tv", "dppo_kl")],
    ),
    "F7": Finding(
        "F7",
        "(paper) MiniRL is the most stable and best on-policy: more stable than GRPO and than CISPO, or, where "
        "neither collapses, its held-out higher",
        lambda lv, r: [best_of(lv, r, ("grpo",)), best_of(lv, r, ("cispo",))],
    ),
    "F8": Finding(
        "F8",
        "(issue 45) MiniRL's weight corrects staleness: more stable than w/o IS with k = 1 and 2 rollouts in flight",
        lambda lv, r: [((lv, (f"k{k}",)), (lv, (f"k{k}", "minirl_no_is")), "log-rank") for k in (1, 2)],
    ),
}
F5_CELLS = (("L2", MINIRL), ("L2", ("cold_start_a",)), ("L2", ("cold_start_b",)))


def staleness_beside(results: dict[Key, CellResult]) -> list[Comparison]:
    """Part 3 (2c), reported beside F8 without a verdict, for k = 1 and 2 against k = 0: MiniRL's held-out (paired
    t-test) and w/o IS's survival (log-rank: does staleness itself hurt the uncorrected arm?)."""
    tests = []
    for k in (1, 2):
        tests.append(heldout_test("F8 beside", "L2", results["L2", (f"k{k}",)], results["L2", MINIRL]))
        tests.append(survival_test("F8 beside", "L2", results["L2", (f"k{k}", *NO_IS)], results["L2", NO_IS]))
    return [replace(t, verdict="reported") for t in tests]


def f8_separable(results: dict[Key, CellResult]) -> bool:
    """Part 2c: F8 speaks of staleness only where w/o IS holds against the FP8 mismatch alone (k = 0 at L2)."""
    return not results["L2", NO_IS].collapses_or_tied


def sequence_of(name: str, levels: tuple[str, bool, str | None] | None) -> list[str] | None:
    """The fixed sequence: L7 down to L1 for F1; L* then L2 for the rest (F6: those at L_M and above, L_M too)."""
    if name == "F1":
        return list(CORE_LEVELS)
    if name == "F8":  # Part 3: at L2 only
        return ["L2"]
    if levels is None:
        return None
    l_star, _, l_m = levels
    if name != "F6":
        return [l_star, "L2"]
    return sorted({lv for lv in (l_star, "L2", l_m) if rank(lv) >= rank(l_m)}, key=rank, reverse=True)


def level_verdict(tests: list[Comparison]) -> str:
    verdicts = {t.verdict for t in tests}
    return "reproduced" if verdicts == {"reproduced"} else "reversed" if "reversed" in verdicts else "not detected"


def power_of(power: dict[int, str], family: int) -> str:
    """The log-rank test's power against 2x for a Holm family of ``family`` comparisons (Part 2c): pilot/power.md
    gives it for one (level 0.05) and two (0.025); larger families' power was not computed."""
    return power.get(family, f"power not computed for a family of {family}")


def finding_line(name: str, tests_by_level: dict[str, list[Comparison]], power: dict[int, str]) -> str:
    """Reproduced at dial level >= X (X: the lowest level reached with every level above it reproduced), where the
    sequence stops and why, and later levels reproduced or reversed, listed apart."""
    reached, stop, apart = fixed_sequence([(lv, level_verdict(t)) for lv, t in tests_by_level.items()])
    parts = [f"reproduced at dial level >= {reached[-1]}"] if reached else []
    if stop is not None:
        level, verdict = stop
        survival = any(t.kind == "log-rank" for t in tests_by_level[level])
        family = len(tests_by_level[level])
        why = f"{verdict} ({power_of(power, family)})" if verdict == "not detected" and survival else verdict
        parts.append(f"{'the sequence stops at' if reached else 'at its first level,'} {level}: {why}")
    if apart:
        parts.append("apart, after the gap: " + ", ".join(f"{lv} {v}" for lv, v in apart))
    return "; ".join(parts)


def f5(results: dict[Key, CellResult]) -> tuple[list[Comparison], str]:
    """F5: all three cold starts hold, each pair's 95% t-interval of d_s inside +-0.05, each cell's held-out
    (mean over seeds) changes by less than the margin from 700 to 900 updates; reversed where an interval lies
    wholly outside +-0.05. No correction."""
    tests, inside, outside = [], True, False
    for i, a in enumerate(F5_CELLS):
        for b in F5_CELLS[i + 1 :]:
            test, d = heldout_test("F5", "L2", results[a], results[b]), differences(results[a], results[b])
            low, high = t_interval(d) if len(d) > 1 else (math.nan, math.nan)
            inside &= low > -BOUND and high < BOUND
            outside |= high < -BOUND or low > BOUND
            tests.append(replace(test, beside=f"95% t-interval [{low:.3f}, {high:.3f}]; {test.beside}"))
    plateaus = []
    for key in F5_CELLS:
        runs = [r for r in results[key].runs if r.final is not None]
        early, late = (sum(heldout_after(r, n) for r in runs) / max(len(runs), 1) for n in (700, 900))
        plateaus.append(
            bool(runs) and HeldoutChange("", "", 700, early, 900, late, len(runs[0].final)).verdict == "no change"
        )
    holds = all(results[key].holds for key in F5_CELLS) and results[CONTROL].holds
    verdict = "reproduced" if holds and inside and all(plateaus) else "reversed" if outside else "not detected"
    return [replace(t, verdict=verdict) for t in tests], (
        f"at L2: {verdict} (all three hold: {'yes' if holds else 'no'}; intervals inside +-{BOUND}: "
        f"{'yes' if inside else 'no'}; plateau 700 -> 900 in each: {'yes' if all(plateaus) else 'no'})"
    )


def cells_of(name: str, sequence: list[str], results: dict[Key, CellResult]) -> list[Key]:
    """Every cell the finding reads over its sequence, the control first."""
    if name == "F5":
        return [CONTROL, *F5_CELLS]
    finding = FINDINGS[name]
    k0 = [("L2", MINIRL), ("L2", NO_IS)] if name == "F8" else []  # Part 2c: F8's gate and what it reports beside
    return [CONTROL, *k0] + [key for lv in sequence for a, b, _ in finding.comparisons(lv, results) for key in (a, b)]


def findings(results: dict[Key, CellResult], power: dict[int, str]) -> tuple[list[str], list[Comparison]]:
    """One line per finding (its verdict, or "not run" where a cell it reads is not complete), and every test made."""
    levels = decided_levels(results)
    lines, tests = [], []
    for name in ("F1", "F2", "F3 clip", "F3 replay", "F4", "F5", "F6", "F7", "F8"):
        claim = "(paper) once stable, different cold starts reach similar final accuracy" if name == "F5" else ""
        claim = claim or FINDINGS[name].claim
        if name == "F6" and levels is not None and levels[2] is None:  # no L_M: MiniRL's core never collapses
            lines.append(f"- **F6** {claim}: premise not reproduced: MiniRL does not collapse up to a 14-nat gap")
            continue
        sequence = ["L2"] if name == "F5" else sequence_of(name, levels)
        complete = sequence is not None and all(
            key in results and results[key].complete for key in cells_of(name, sequence, results)
        )
        if not complete:
            lines.append(f"- **{name}** {claim}: not run")
            continue
        if name == "F5":
            f5_tests, line = f5(results)
            tests += f5_tests
            lines.append(f"- **F5** {claim}: {line}")
            continue
        by_level = {lv: FINDINGS[name].at(lv, results) for lv in sequence}
        tests += [t for lv in sequence for t in by_level[lv]]
        line = finding_line(name, by_level, power)
        if name == "F8":  # Part 3 and 2c: gated on w/o IS at k = 0, the tests beside it
            tests += staleness_beside(results)
            if not f8_separable(results):
                tests = [replace(t, verdict="not separable") if t.finding == "F8" else t for t in tests]
                line = "not separable from the FP8 mismatch (w/o IS collapses at k = 0 too)"
        lines.append(f"- **{name}** {claim} ({', '.join(sequence)}): {line}")
    return lines, tests


def label(key: Key, results: dict[Key, CellResult]) -> str:
    return method_of(results[key].cell)


def tests_table(tests: list[Comparison], results: dict[Key, CellResult]) -> str:
    """Every test made: raw and Holm-adjusted p, what is reported beside it, the comparison's verdict."""
    lines = [
        "| finding | level | A | B | test | statistic | p | adjusted p | beside | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in tests:
        stat = f"Z = {t.statistic:+.3f}" if t.kind == "log-rank" else f"mean d = {t.statistic:+.4f}"
        adjusted = "—" if math.isnan(t.adjusted) else f"{t.adjusted:.3g}"
        lines.append(
            f"| {t.finding} | {t.level} | {label(t.a, results)} | {label(t.b, results)} | {t.kind} | {stat} | "
            f"{t.p:.3g} | {adjusted} | {t.beside} | {t.verdict} |"
        )
    return "\n".join(lines) + "\n"
