r"""Worked solutions for reasoning-gym rows, for a cold-start SFT stage.

Each solution is short and regular: one line per arithmetic step ("a op b = c", integers written as reasoning-gym
writes its answers) and a last line ``\boxed{answer}`` with the row's gold answer verbatim. A row whose steps don't
reach that answer gets no solution (None) rather than a wrong one.

Place-value steps (``by_place=True``, arithmetic generators) make long solutions of easy steps: an addition or
subtraction of a number with several nonzero digits is first rewritten by place ("a + 305 = a + 300 + 5"), then
worked one place at a time ("a + 300 = c", "c + 5 = d"); a chain_sum of 10 three-digit terms takes ~30 lines.
"""

import ast
import operator
import re
from collections.abc import Callable
from fractions import Fraction

# gsm_symbolic's answer_cot ends with "#### 288" (sometimes "#### 8.0" for the answer "8").
_GSM_MARKER = re.compile(r"####\s*(?P<value>-?\d+(?:\.\d+)?)\s*$")


def _exact_div(a: int, b: int) -> int:
    """a / b when b divides a; reasoning-gym's basic_arithmetic floors the others (7 / 2 -> 3), which we don't teach."""
    if b == 0 or a % b:
        raise ValueError(f"{a} / {b} is not an integer")
    return a // b


_BINARY_OPS: dict[type[ast.operator], tuple[str, Callable[[int, int], int]]] = {
    ast.Add: ("+", operator.add),
    ast.Sub: ("-", operator.sub),
    ast.Mult: ("*", operator.mul),
    ast.Div: ("/", _exact_div),
}


def _evaluate(node: ast.expr, steps: list[str], by_place: bool = False) -> int:
    """Value of an integer expression, appending one step line per operation in Python's evaluation order
    (with ``by_place``, additions and subtractions as ``_place_steps`` writes them)."""
    match node:
        case ast.Constant(value=int() as value):
            return value
        case ast.UnaryOp(op=ast.USub(), operand=ast.Constant(value=int() as value)):  # a literal such as -33
            return -value
        case ast.UnaryOp(op=ast.USub(), operand=operand):  # -( ... )
            value = _evaluate(operand, steps, by_place)
            steps.append(f"-({value}) = {-value}")
            return -value
        case ast.BinOp(left=left, op=op, right=right) if type(op) in _BINARY_OPS:
            a, b = _evaluate(left, steps, by_place), _evaluate(right, steps, by_place)
            symbol, apply = _BINARY_OPS[type(op)]
            value = apply(a, b)
            steps += _place_steps(a, symbol, b) if by_place and symbol in "+-" else [f"{a} {symbol} {b} = {value}"]
            return value
    raise ValueError(f"unsupported expression: {ast.unparse(node)}")


def _place_steps(a: int, symbol: str, b: int) -> list[str]:
    """a + b or a - b one place of b at a time: "17 - 305 = 17 - 300 - 5", "17 - 300 = -283", "-283 - 5 = -288"
    (a b with one nonzero digit, or a negative b, is added or subtracted as it is written: "17 + -30 = -13")."""
    sign = 1 if symbol == "+" else -1
    digits = str(abs(b))
    places = [int(d) * 10 ** (len(digits) - 1 - i) for i, d in enumerate(digits) if d != "0"]
    if b < 0 or len(places) < 2:
        return [f"{a} {symbol} {b} = {a + sign * b}"]
    lines = [f"{a} {symbol} {b} = {a} {symbol} {f' {symbol} '.join(map(str, places))}"]
    for place in places:
        lines.append(f"{a} {symbol} {place} = {a + sign * place}")
        a += sign * place
    return lines


def _linear(node: ast.expr, variable: str) -> tuple[int, int]:
    """(a, b) with node == a*variable + b, for an expression linear in variable."""
    match node:
        case ast.Constant(value=int() as value):
            return 0, value
        case ast.Name(id=name) if name == variable:
            return 1, 0
        case ast.UnaryOp(op=ast.USub(), operand=operand):
            a, b = _linear(operand, variable)
            return -a, -b
        case ast.BinOp(left=left, op=ast.Add() | ast.Sub() as op, right=right):
            (a1, b1), (a2, b2) = _linear(left, variable), _linear(right, variable)
            sign = 1 if isinstance(op, ast.Add) else -1
            return a1 + sign * a2, b1 + sign * b2
        case ast.BinOp(left=left, op=ast.Mult(), right=right):
            (a1, b1), (a2, b2) = _linear(left, variable), _linear(right, variable)
            if a1 and a2:
                raise ValueError("not linear")
            return a1 * b2 + a2 * b1, b1 * b2
    raise ValueError(f"unsupported expression: {ast.unparse(node)}")


def _boxed(lines: list[str], result: str, answer: str) -> str | None:
    r"""The lines and ``\boxed{answer}``, or None when the worked result is not the gold answer."""
    return "\n".join([*lines, f"\\boxed{{{answer}}}"]) if result == answer else None


def _arithmetic_solution(row: dict, by_place: bool = False) -> str | None:
    """basic_arithmetic and chain_sum: evaluate metadata["expression"] one binary operation at a time."""
    steps: list[str] = []
    try:
        value = _evaluate(ast.parse(row["metadata"]["expression"], mode="eval").body, steps, by_place)
    except (SyntaxError, ValueError):
        return None
    return _boxed(steps, str(value), row["answer"])


def _gsm_solution(row: dict) -> str | None:
    """gsm_symbolic: the generator's own chain of thought, its "#### N" marker replaced by the box."""
    cot = row["metadata"].get("answer_cot")
    match = _GSM_MARKER.search(cot) if cot else None
    if match is None or Fraction(match["value"]) != Fraction(row["answer"]):
        return None
    return _boxed([cot[: match.start()].rstrip()], row["answer"], row["answer"])


def _term(coefficient: int, variable: str) -> str:
    """coefficient*variable as sympy writes it: "x", "-x" or "98*x"."""
    return {1: variable, -1: f"-{variable}"}.get(coefficient, f"{coefficient}*{variable}")


def _equation_solution(row: dict) -> str | None:
    """simple_equations: for a*x + b = r, move the constant to the right, then divide by the coefficient."""
    variable = row["metadata"]["variable"]
    try:
        left, right = (ast.parse(side.strip(), mode="eval").body for side in row["metadata"]["equation"].split("="))
        (a, b), (zero, r) = _linear(left, variable), _linear(right, variable)
    except (SyntaxError, ValueError):  # also no "=" or several
        return None
    if a == 0 or zero != 0 or (r - b) % a:
        return None
    lines = []
    if b:
        moved = f"{r} - {b}" if b > 0 else f"{r} + {-b}"
        r -= b
        lines += [f"{_term(a, variable)} = {moved}", f"{moved} = {r}"]
    if a != 1:
        lines += [f"{variable} = {r} / {a}", f"{r} / {a} = {r // a}"]
    return _boxed(lines, str(r // a), row["answer"])


_SOLVERS: dict[str, Callable[[dict], str | None]] = {
    "basic_arithmetic": _arithmetic_solution,
    "chain_sum": _arithmetic_solution,
    "gsm_symbolic": _gsm_solution,
    "simple_equations": _equation_solution,
}

SOLVABLE_GENERATORS: tuple[str, ...] = tuple(_SOLVERS)


def worked_solution(row: dict, by_place: bool = False) -> str | None:
    r"""A worked solution ending in ``\boxed{row["answer"]}``, or None for unsupported generators and rows.
    ``by_place``: place-value steps for the arithmetic generators (the others are unchanged)."""
    name = row["metadata"].get("source_dataset")
    if by_place and name in ("basic_arithmetic", "chain_sum"):
        return _arithmetic_solution(row, by_place=True)
    solver = _SOLVERS.get(name)
    return solver(row) if solver else None
