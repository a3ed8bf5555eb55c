"""worked_solution: hand-worked rows, real reasoning-gym rows, and properties over 300 seeded rows per generator."""

import re
from fractions import Fraction

import pytest
import reasoning_gym
from math_verify import parse, verify

from stable_rl.data.solutions import SOLVABLE_GENERATORS, worked_solution

NUM = r"-?\d+(?:\.\d+)?"
STEP = re.compile(rf"({NUM}) ([-+*/]) ({NUM}) = ({NUM})")  # "a op b = c"
NEGATION = re.compile(rf"-\(({NUM})\) = ({NUM})")  # "-(a) = c"
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
