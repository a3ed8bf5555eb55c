"""worked_solution: hand-worked rows, real reasoning-gym rows, and properties over 300 seeded rows per generator."""

import re
import statistics
from fractions import Fraction
from pathlib import Path

import pytest
import reasoning_gym
import yaml
from math_verify import parse, verify
from transformers import AutoTokenizer

from stable_rl.data.prompts import ReasoningGymPrompts
from stable_rl.data.solutions import SOLVABLE_GENERATORS, worked_solution
from stable_rl.data.verifier import is_correct

REPO = Path(__file__).resolve().parents[2]

NUM = r"-?\d+(?:\.\d+)?"
STEP = re.compile(rf"({NUM}) ([-+*/]) ({NUM}) = ({NUM})")  # "a op b = c"
NEGATION = re.compile(rf"-\(({NUM})\) = ({NUM})")  # "-(a) = c"
REWRITE = re.compile(rf"({NUM}) ([-+]) (\d+) = \1 \2 (\d+(?: \2 \d+)+)")  # "a - 305 = a - 300 - 5"
DIGITS = set("123456789")
APPLY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b}


def arithmetic_row(name: str, expression: str, answer: str) -> dict:
    return {"question": "", "answer": answer, "metadata": {"source_dataset": name, "expression": expression}}


def gsm_row(answer_cot: str, answer: str) -> dict:
    return {"question": "", "answer": answer, "metadata": {"source_dataset": "gsm_symbolic", "answer_cot": answer_cot}}


def equation_row(equation: str, variable: str, answer: str) -> dict:
    metadata = {"source_dataset": "simple_equations", "equation": equation, "variable": variable}
    return {"question": "", "answer": answer, "metadata": metadata}


HAND_WORKED = [
    (arithmetic_row("basic_arithmetic", "5 - 3 - 6", "-4"), "5 - 3 = 2\n2 - 6 = -4\n\\boxed{-4}"),
    (arithmetic_row("basic_arithmetic", "2 + 12 / 4 * 3", "11"), "12 / 4 = 3\n3 * 3 = 9\n2 + 9 = 11\n\\boxed{11}"),
    (arithmetic_row("basic_arithmetic", "-( 3 + 4 ) * -2", "14"), "3 + 4 = 7\n-(7) = -7\n-7 * -2 = 14\n\\boxed{14}"),
    (arithmetic_row("chain_sum", "57 + 87 + 70", "214"), "57 + 87 = 144\n144 + 70 = 214\n\\boxed{214}"),
    (arithmetic_row("chain_sum", "9 - 12", "-3"), "9 - 12 = -3\n\\boxed{-3}"),
    (
        gsm_row("He has 3*4=12 apples.\nHe eats 2, so 12-2=10.\n#### 10", "10"),
        "He has 3*4=12 apples.\nHe eats 2, so 12-2=10.\n\\boxed{10}",
    ),
    (gsm_row("Step 1:\n   - 16 / 2 = 8\n\n#### 8.0", "8"), "Step 1:\n   - 16 / 2 = 8\n\\boxed{8}"),
    (
        equation_row("56 - 98*e = -1218", "e", "13"),
        "-98*e = -1218 - 56\n-1218 - 56 = -1274\ne = -1274 / -98\n-1274 / -98 = 13\n\\boxed{13}",
    ),
    (equation_row("4465*b = 178600", "b", "40"), "b = 178600 / 4465\n178600 / 4465 = 40\n\\boxed{40}"),
    (equation_row("x - 5 = -3", "x", "2"), "x = -3 + 5\n-3 + 5 = 2\n\\boxed{2}"),
]

REAL = [  # (generator, seed, index, solution) hand-checked against the row's question
    ("basic_arithmetic", 1, 2, "56 + -33 = 23\n23 - 84 = -61\n\\boxed{-61}"),
    ("basic_arithmetic", 1, 3, "478 / 1 = 478\n478 + -682 = -204\n\\boxed{-204}"),
    ("chain_sum", 1, 3, "205 - 838 = -633\n-633 + 505 = -128\n\\boxed{-128}"),
    (
        "gsm_symbolic",
        1,
        2,
        "Michael dropped his pebbles and was left with 72*0.25=18 pebbles.\n"
        "He searched and found some of his lost pebbles, getting him back to 18+4=22 pebbles.\n"
        "He went home and removed coins, leaving him with 22-3=19 pebbles.\n\\boxed{19}",
    ),
    ("simple_equations", 1, 3, "20*h = 1485 - 65\n1485 - 65 = 1420\nh = 1420 / 20\n1420 / 20 = 71\n\\boxed{71}"),
]

UNSOLVED = [
    arithmetic_row("basic_arithmetic", "7 / 2", "3"),  # reasoning-gym floors inexact divisions
    arithmetic_row("basic_arithmetic", "7 / ( 2 - 2 )", "0"),
    arithmetic_row("chain_sum", "1 + 2", "4"),  # steps disagree with the gold answer
    arithmetic_row("basic_arithmetic", "2 ** 3", "8"),
    gsm_row("He has 3*4=12 apples.\n#### 12", "13"),
    gsm_row("He has 3*4=12 apples.", "12"),  # no "####" marker
    equation_row("0 = 0", "i", "83"),
    equation_row("x*x = 4", "x", "2"),
    equation_row("3*x = 4", "x", "1"),
    {"question": "Sort these words", "answer": "a, b", "metadata": {"source_dataset": "word_sorting"}},
]


@pytest.mark.parametrize(("row", "solution"), HAND_WORKED)
def test_hand_worked(row, solution):
    assert worked_solution(row) == solution


@pytest.mark.parametrize(("name", "seed", "index", "solution"), REAL)
def test_real_rows(name, seed, index, solution):
    assert worked_solution(reasoning_gym.create_dataset(name, size=index + 1, seed=seed)[index]) == solution


@pytest.mark.parametrize("row", UNSOLVED)
def test_unsolved_is_none(row):
    assert worked_solution(row) is None


@pytest.fixture(scope="module", params=SOLVABLE_GENERATORS)
def solved(request) -> list[tuple[dict, str]]:
    """(row, solution) for the solved rows among 300 seeded rows of one generator; at least 95% are solved."""
    rows = list(reasoning_gym.create_dataset(request.param, size=300, seed=2024))
    pairs = [(row, solution) for row in rows if (solution := worked_solution(row)) is not None]
    assert len(pairs) >= 0.95 * len(rows)
    return pairs


def test_steps_are_correct_and_end_in_the_gold_box(solved):
    for row, solution in solved:
        *lines, last = solution.split("\n")
        assert last == f"\\boxed{{{row['answer']}}}"
        for line in lines:
            if step := STEP.fullmatch(line.strip()):
                a, op, b, c = step.groups()
                assert APPLY[op](Fraction(a), Fraction(b)) == Fraction(c), line
            elif negation := NEGATION.fullmatch(line):
                assert -Fraction(negation[1]) == Fraction(negation[2]), line
            else:  # only the free-form generators write other lines
                assert row["metadata"]["source_dataset"] in {"gsm_symbolic", "simple_equations"}, line


def test_boxed_answer_verifies(solved):
    for row, solution in solved:
        assert verify(parse(f"\\boxed{{{row['answer']}}}"), parse(solution)), solution


BY_PLACE = [
    (
        arithmetic_row("chain_sum", "84 - 48 + 305", "341"),
        "84 - 48 = 84 - 40 - 8\n84 - 40 = 44\n44 - 8 = 36\n"
        "36 + 305 = 36 + 300 + 5\n36 + 300 = 336\n336 + 5 = 341\n\\boxed{341}",
    ),
    (arithmetic_row("chain_sum", "7 - 70 + 9", "-54"), "7 - 70 = -63\n-63 + 9 = -54\n\\boxed{-54}"),  # one digit each
    (arithmetic_row("basic_arithmetic", "56 + -33 * 12", "-340"), "-33 * 12 = -396\n56 + -396 = -340\n\\boxed{-340}"),
]


@pytest.mark.parametrize(("row", "solution"), BY_PLACE)
def test_place_value_steps_split_each_addition_by_place(row, solution):
    assert worked_solution(row, by_place=True) == solution


def test_place_value_steps_leave_other_generators_alone():
    row = equation_row("x - 5 = -3", "x", "2")
    assert worked_solution(row, by_place=True) == worked_solution(row) == "x = -3 + 5\n-3 + 5 = 2\n\\boxed{2}"


def test_the_long_tasks_solutions_verify_and_run_to_hundreds_of_tokens(smollm2_path):
    """recipes/long's task (chain_sum, 6-8 terms of 2-3 digits), 300 rows: every step right, the box verified by
    math-verify, and hundreds of SmolLM2 tokens per solution."""
    recipe = yaml.safe_load((REPO / "recipes/long/cold_start_sft_smollm2_moe.yaml").read_text())
    settings = {**recipe["data"]["init_args"]["prompts"]["init_args"], "size": 300, "seed": 2024}
    tokenizer = AutoTokenizer.from_pretrained(smollm2_path)
    lengths = []
    for row in ReasoningGymPrompts(**settings).rows():
        solution = worked_solution(row, by_place=True)
        *lines, _ = solution.split("\n")
        for line in lines:
            if rewrite := REWRITE.fullmatch(line):  # b written as its place values, one nonzero digit each
                places = rewrite[4].split(f" {rewrite[2]} ")
                assert sum(map(int, places)) == int(rewrite[3]) and all(p.strip("0") in DIGITS for p in places), line
            else:
                a, op, b, c = STEP.fullmatch(line).groups()
                assert APPLY[op](Fraction(a), Fraction(b)) == Fraction(c), line
        assert is_correct(solution, row["answer"]), solution
        lengths.append(len(tokenizer(solution, add_special_tokens=False)["input_ids"]))
    assert (min(lengths), statistics.median(lengths), max(lengths)) == (166, 317.5, 528)
