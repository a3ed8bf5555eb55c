"""Gold answers math-verify cannot use are dropped at load, named in a warning, before any rollout."""

import json
import re
from types import SimpleNamespace

import pytest

from stable_rl import StableRLWarning
from stable_rl.data import FilePrompts
from stable_rl.data.gold_answers import usable_problems
from stable_rl.data.prompts import Problem
from stable_rl.data.verifier import MathVerifier
from stable_rl.rl import RolloutDataModule
from stable_rl.rollout import HFEngine

ANSWERS = ["3", r"\frac{1}{2}", "10^{10^{10}}", "}{", "-7", "9!!!!", "x^2+1", "10^{10^{10}}"]


@pytest.fixture(scope="module")
def verifier():
    with MathVerifier(num_workers=2, timeout=1.0) as v:
        v([r"\boxed{1}", r"\boxed{2}"], ["1", "2"])  # workers started and math-verify imported: 1 s is scoring alone
        yield v


def test_gold_answers_that_would_score_every_response_0_are_dropped_by_name(verifier):
    problems = [Problem(f"q{i}", answer) for i, answer in enumerate(ANSWERS)]
    with pytest.warns(StableRLWarning) as caught:
        kept = usable_problems(problems, verifier, "data.prompts (p.jsonl)")
    assert [p.answer for p in kept] == ["3", r"\frac{1}{2}", "-7", "x^2+1"]
    assert str(caught[0].message) == (
        "dropped 4 of the 8 problems of data.prompts (p.jsonl): math-verify cannot use their gold answer "
        "(row 2: '10^{10^{10}}' runs out of the verifier's time against a plain number; row 3: '}{' does not match "
        "itself; row 5: '9!!!!' runs out of the verifier's time against a plain number; and 1 more), so every "
        "response would score 0 (timeout 1.0 s): write the answer as a plain value (a number, a fraction, an "
        "expression) or remove the row"
    )


def test_plain_numbers_are_not_sent_to_the_verifier():
    class Refusing(MathVerifier):
        def score(self, responses, answers):
            raise AssertionError(f"checked {answers}")

    problems = [Problem("q", answer) for answer in ("12", "-3.25", "123456789012345678901234567890")]
    assert usable_problems(problems, Refusing(), "data.prompts") == problems


def test_the_data_module_loads_only_usable_problems(tmp_path, tiny_model_path, verifier):
    path = tmp_path / "p.jsonl"
    rows = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(3)]
    rows.insert(1, {"prompt": "How big?", "answer": "(10^{100})!"})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    data = RolloutDataModule(
        FilePrompts(str(path)), engine=HFEngine(), verifier=verifier, prompts_per_step=2, model_path=tiny_model_path
    )
    data.trainer = SimpleNamespace(
        global_rank=0,
        local_rank=0,
        world_size=1,
        num_devices=1,
    )
    named = re.escape(
        f"of data.prompts ({path}): math-verify cannot use their gold answer (row 1: '(10^{{100}})!' runs"
    )
    with pytest.warns(StableRLWarning, match=f"dropped 1 of the 4 problems {named}"):
        data.setup("fit")
    assert [p.answer for p in data.problems] == ["1", "2", "3"]


LOOK_ALIKES = [
    "４２",
    "٤٢",
    "4\u200b2",
    "\u200f42",
    "४२",
]  # full-width, Arabic-Indic, zero-width space, RTL mark, Devanagari


def test_gold_answers_written_with_look_alike_characters_are_kept_and_match_plain_digits(verifier):
    problems = [Problem(f"q{i}", answer) for i, answer in enumerate(LOOK_ALIKES)]
    assert usable_problems(problems, verifier, "data.prompts (p.jsonl)") == problems  # none dropped, no warning
    assert verifier([r"The answer is \boxed{42}."] * len(LOOK_ALIKES), LOOK_ALIKES).tolist() == [1.0] * 5
    assert verifier([r"\boxed{43}"] * len(LOOK_ALIKES), LOOK_ALIKES).tolist() == [0.0] * 5
