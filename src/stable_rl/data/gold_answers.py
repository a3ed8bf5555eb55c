"""Gold answers checked once, when the problems are loaded.

A gold answer that math-verify cannot match even to itself (``}{``, a 1 MB answer), or that runs out of the
verifier's time against a plain number (a power tower such as ``10^{10^{10}}``, ``9!!!!``), scores every
response 0, each after the timeout. Its problems are dropped with a warning naming the rows: the run trains
on the others. Plain numbers, most datasets' answers, parse at once and are not checked.
"""

import re

from lightning.pytorch.utilities import rank_zero_warn

from stable_rl import StableRLWarning
from stable_rl.data.prompts import Problem
from stable_rl.data.verifier import MathVerifier

PLAIN_NUMBER = re.compile(r"-?\d{1,30}(\.\d{1,30})?")
_SHOWN = 3  # dropped rows named in the warning


def usable_problems(problems: list[Problem], verifier: MathVerifier, where: str) -> list[Problem]:
    """``problems`` without those whose gold answer math-verify cannot use; ``where`` names their source."""
    answers = sorted({p.answer for p in problems if not PLAIN_NUMBER.fullmatch(p.answer)})
    if not answers:
        return problems
    matches, _ = verifier.score([f"\\boxed{{{a}}}" for a in answers], answers)
    _, timed_out = verifier.score(["\\boxed{0}"] * len(answers), answers)
    unusable = {
        answer: "runs out of the verifier's time against a plain number" if slow else "does not match itself"
        for answer, match, slow in zip(answers, matches.tolist(), timed_out.tolist(), strict=True)
        if slow or not match
    }
    dropped = [(row, p.answer) for row, p in enumerate(problems) if p.answer in unusable]
    if dropped:
        named = "; ".join(f"row {row}: {answer[:40]!r} {unusable[answer]}" for row, answer in dropped[:_SHOWN])
        more = f"; and {len(dropped) - _SHOWN} more" if len(dropped) > _SHOWN else ""
        rank_zero_warn(
            f"dropped {len(dropped)} of the {len(problems)} problems of {where}: math-verify cannot use their gold "
            f"answer ({named}{more}), so every response would score 0 (timeout {verifier.timeout} s): write the "
            "answer as a plain value (a number, a fraction, an expression) or remove the row",
            category=StableRLWarning,
        )
    return [p for p in problems if p.answer not in unusable]
