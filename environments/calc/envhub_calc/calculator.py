"""A safe arithmetic evaluator: parsed with ``ast``, never ``eval``.

Only numbers, + - * / // % ** and parentheses are allowed, with limits on expression
length, exponent size and result magnitude, so a model cannot hang or exhaust the host.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable

__all__ = ["MAX_EXPONENT", "MAX_LENGTH", "CalculatorError", "evaluate"]

MAX_LENGTH = 200
MAX_EXPONENT = 64
MAX_MAGNITUDE = 1e18

_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[float], float]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}


class CalculatorError(ValueError):
    """The expression is not plain arithmetic or breaks a limit."""


def _eval(node: ast.AST) -> float:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        if abs(node.value) > MAX_MAGNITUDE:
            raise CalculatorError(f"number out of range (limit {MAX_MAGNITUDE:g})")
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalculatorError(f"exponent {right} is larger than {MAX_EXPONENT}")
        try:
            value = _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise CalculatorError("division by zero") from None
        except OverflowError:  # float ** float past 1e308 raises instead of giving inf
            raise CalculatorError("result out of range") from None
        if isinstance(value, complex) or abs(value) > MAX_MAGNITUDE:
            raise CalculatorError("result out of range")
        return value
    raise CalculatorError(f"unsupported syntax: {ast.dump(node)[:60]}")


def evaluate(expression: str) -> float:
    """Evaluate an arithmetic expression such as ``"(12 + 3) * 4 / 5"``."""
    if len(expression) > MAX_LENGTH:
        raise CalculatorError(f"expression longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError):  # ValueError: text Python cannot encode (surrogates)
        raise CalculatorError(f"not an arithmetic expression: {expression!r}") from None
    return _eval(tree.body)  # every number and result is within MAX_MAGNITUDE, so finite
