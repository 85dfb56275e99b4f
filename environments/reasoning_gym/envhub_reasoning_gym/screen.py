"""What an answer may be before a scorer that evaluates it sees it.

Nine Reasoning Gym scorers evaluate the answer text (:data:`EVALUATING_DATASETS`): four
with Python's ``eval``, five with sympy's ``parse_expr``. ``parse_expr`` does not
evaluate the text: its transformations first rewrite it (``x!`` becomes ``factorial(x)``,
an unknown name ``Symbol('x')``, a number ``Integer(3)``) and the result is what reaches
``eval``. So the screen judges the code that will be evaluated, never the raw text: for
``eval`` the text itself, parsed by Python's own parser; for ``parse_expr`` the code that
sympy's own transformations make of it (sympy runs them here and is stopped before it
evaluates anything).

That code must be one expression in a small grammar, :class:`_Grammar`: numbers, names,
arithmetic, calls of math functions, lists and tuples; for sympy also the
``Integer``/``Float``/``Rational``/``Symbol`` calls its transformations insert and only the
names sympy defines as math (``exec`` stays a bare name there: refused). Strings are
refused where sympy would parse them (any sympy function parses a string argument as
code, so ``sin("...")`` is code too); for ``eval`` one-character strings are kept (board
and character-list answers). Sizes are bounded, not only exponents (:func:`_bits`):
exponents are constants of at most 64, factorials of constants at most 1000, sequences
are never multiplied, and an upper bound on the bits of every value the expression
computes, derived from the tree with a symbol counted as one bit, is at most 2**14; the
text at most 2000 characters and 100 levels deep.

For ``eval``, text that does not parse is let through (board answers are not Python):
``eval`` then fails the same way before anything runs. For ``parse_expr`` such text is
refused: the integration scorers pass their variable in ``local_dict``, which leaves it a
bare name where the screen sees ``Symbol('x')``, and ``(x := exec(...))`` or
``[exec(...) for x in ...]`` compiles only with the bare name. Every sympy scorer parses
first, so it would give such text the reward of unparseable text anyway. The scorer
scores a refused answer as :data:`UNPARSEABLE`, an answer it cannot parse, so the reward
is the one the dataset itself gives such text.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["EVALUATING_DATASETS", "UNPARSEABLE", "Evaluator", "plain_expression", "refusal"]

Evaluator = Literal["eval", "parse_expr"]

#: datasets whose score_answer evaluates the answer, and how (audited against every
#: dataset by the plugin's tests: a dataset that evaluates an answer and is missing fails)
EVALUATING_DATASETS: Mapping[str, Evaluator] = {
    "binary_matrix": "eval",
    "n_queens": "eval",
    "spiral_matrix": "eval",
    "string_insertion": "eval",
    "countdown": "parse_expr",
    "intermediate_integration": "parse_expr",
    "polynomial_multiplication": "parse_expr",
    "puzzle24": "parse_expr",
    "simple_integration": "parse_expr",
}

#: what a refused answer is scored as: text neither Python nor sympy can parse
UNPARSEABLE = "("

_MAX_CHARS = 2000
_MAX_DEPTH = 100
_MAX_BITS = 2**14
_MAX_EXPONENT = 64
_MAX_FACTORIAL = 1000

#: the functions an answer may call: what sympy answers (integrals) contain
_MATH = frozenset(
    "exp log ln sqrt sin cos tan cot sec csc asin acos atan acot sinh cosh tanh asinh acosh "
    "atanh Abs abs Integral".split()
)
_FACTORIALS = frozenset({"factorial", "factorial2"})
#: the calls sympy's transformations insert around numbers and undefined names
_SYMPY_NUMBERS = frozenset({"Integer", "Float", "Rational"})
_SYMPY_CONSTANTS = frozenset({"I", "pi", "E", "oo"})
_DECIMAL = re.compile(r"(?P<digits>[0-9_]*\.?[0-9_]*)(?:[eE](?P<exponent>[-+]?[0-9_]+))?")

_ARITHMETIC: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: float.__add__,
    ast.Sub: float.__sub__,
    ast.Mult: float.__mul__,
    ast.Div: float.__truediv__,
}
_ADDITIVE = (ast.Add, ast.Sub, ast.BitAnd, ast.BitOr, ast.BitXor)
_MULTIPLICATIVE = (ast.Mult, ast.Div, ast.FloorDiv, ast.Mod)


@dataclass(frozen=True)
class _Grammar:
    """Which names an evaluator's code may use and call, and where strings may appear."""

    calls: frozenset[str]
    name_allowed: Callable[[str], bool]
    #: calls whose one argument is a string literal that is not parsed (``Symbol('x')``)
    string_calls: frozenset[str]
    #: the longest string literal allowed anywhere else (-1: none)
    max_string: int


_GRAMMARS: dict[Evaluator, _Grammar] = {
    "eval": _Grammar(_MATH, lambda name: not name.startswith("_"), frozenset(), 1),
    "parse_expr": _Grammar(
        _MATH | _FACTORIALS | _SYMPY_NUMBERS,
        (_MATH | _FACTORIALS | _SYMPY_NUMBERS | _SYMPY_CONSTANTS | {"Symbol"}).__contains__,
        frozenset({"Symbol", "Float"}),
        -1,
    ),
}


class _Refused(Exception):
    """The expression leaves the grammar or its size bounds."""


class _SympyCode(Exception):
    """Carries the code sympy's transformations made, before sympy evaluates it."""


def _stop_before_eval(tokens: list[Any], local_dict: Any, global_dict: Any) -> list[Any]:
    from tokenize import untokenize

    raise _SympyCode(untokenize(tokens))


def _sympy_code(text: str) -> list[str | None]:
    """The code ``parse_expr`` would evaluate for ``text`` and for ``text.strip()`` (some
    scorers strip first); ``None`` where sympy fails before evaluating.

    sympy's own ``parse_expr`` builds its namespace and runs its standard
    transformations, then a last one stops it. The scorers that pass a ``local_dict``
    (the integration variable, ``C``) get ``x`` where this gets ``Symbol('x')``: the same
    tree wherever the code compiles with ``Symbol('x')``."""
    from sympy.parsing.sympy_parser import parse_expr, standard_transformations

    codes: list[str | None] = []
    for variant in dict.fromkeys((text, text.strip())):
        try:
            parse_expr(variant, transformations=(*standard_transformations, _stop_before_eval))
        except _SympyCode as code:
            codes.append(str(code.args[0]))
        except Exception:  # sympy's tokenizer or a transformation refused it: nothing ran
            codes.append(None)
        else:
            raise AssertionError("parse_expr returned without running its transformations")
    return codes


def _python_code(text: str) -> list[str | None]:
    """What ``eval`` parses: the text with leading blanks stripped (``eval`` does that),
    or fully stripped (some scorers strip before they evaluate)."""
    return list(dict.fromkeys((text.lstrip(" \t"), text.strip())))


def _parse(code: str | None) -> ast.Expression | None:
    """The tree of ``code`` as ``eval`` compiles it; ``None`` where ``eval`` would raise
    before running anything (a syntax error, a null byte, an unpaired surrogate) or there
    is no code."""
    if code is None:
        return None
    try:
        return ast.parse(code.lstrip(" \t"), mode="eval")
    except (SyntaxError, ValueError):
        return None
    except (RecursionError, MemoryError):
        raise _Refused from None


def _within_depth(tree: ast.AST) -> bool:
    """At most :data:`_MAX_DEPTH` levels (then :func:`_bits` may recurse)."""
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > _MAX_DEPTH:
            return False
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return True


def _constant(node: ast.expr) -> float | None:
    """The value of a constant made of numbers and ``+ - * /`` (sympy's ``Integer(3)``,
    ``Float('1.5')`` and ``Rational(1, 2)`` included); ``None`` for anything else."""
    try:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)  # a bool too: True is 1 to Python and to sympy
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd | ast.USub):
            value = _constant(node.operand)
            if value is None:
                return None
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
            left, right = _constant(node.left), _constant(node.right)
            if left is None or right is None:
                return None
            return _ARITHMETIC[type(node.op)](left, right)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return _number_call(node.func.id, node.args)
    except (ArithmeticError, ValueError):
        return None
    return None


def _number_call(name: str, args: list[ast.expr]) -> float | None:
    if name == "Float" and len(args) == 1 and isinstance(args[0], ast.Constant):
        return float(str(args[0].value).replace("_", ""))
    if name == "Integer" and len(args) == 1:
        return _constant(args[0])
    if name == "Rational" and len(args) == 2:
        numerator, denominator = _constant(args[0]), _constant(args[1])
        return None if numerator is None or denominator is None else numerator / denominator
    return None


def _bits(node: ast.AST, grammar: _Grammar) -> int:
    """An upper bound on the size in bits of the value ``node`` computes (a symbol counts
    as one bit, a rational as numerator plus denominator): what evaluating it costs is
    known before it is evaluated. Raises :class:`_Refused` outside the grammar."""
    if isinstance(node, ast.Constant):
        return _constant_bits(node.value, grammar)
    if isinstance(node, ast.Name) and grammar.name_allowed(node.id):
        return 1
    if isinstance(node, ast.List | ast.Tuple):
        return sum(_bits(element, grammar) for element in node.elts) + 1
    if isinstance(node, ast.UnaryOp):
        return _bits(node.operand, grammar) + 1
    if isinstance(node, ast.BinOp):
        return _binop_bits(node, grammar)
    if isinstance(node, ast.Call):
        return _call_bits(node, grammar)
    raise _Refused  # attributes, subscripts, lambdas, comprehensions, comparisons, ...


def _constant_bits(value: object, grammar: _Grammar) -> int:
    if type(value) in (int, bool):
        return max(1, abs(int(value)).bit_length())  # type: ignore[call-overload]
    if type(value) in (float, complex):
        return 128
    if isinstance(value, str) and len(value) <= grammar.max_string:
        return 8 * len(value) + 1
    raise _Refused  # strings (sympy parses them as code), bytes, None, ...


def _is_sequence(node: ast.expr) -> bool:
    return isinstance(node, ast.List | ast.Tuple) or (
        isinstance(node, ast.Constant) and isinstance(node.value, str)
    )


def _binop_bits(node: ast.BinOp, grammar: _Grammar) -> int:
    if _is_sequence(node.left) or _is_sequence(node.right):
        raise _Refused  # [0]*10**9, 'a'*10**9: a size the text does not show
    if isinstance(node.op, ast.Pow):
        exponent = _constant(node.right)
        if exponent is None or not math.isfinite(exponent) or abs(exponent) > _MAX_EXPONENT:
            raise _Refused
        return _bits(node.left, grammar) * max(1, math.ceil(abs(exponent)))
    left, right = _bits(node.left, grammar), _bits(node.right, grammar)
    if isinstance(node.op, _ADDITIVE):
        return left + right + 1
    if isinstance(node.op, _MULTIPLICATIVE):
        return left + right
    raise _Refused  # shifts (1 << 10**9), matrix products


def _call_bits(node: ast.Call, grammar: _Grammar) -> int:
    if not isinstance(node.func, ast.Name) or node.keywords:
        raise _Refused
    name, args = node.func.id, node.args
    if name in grammar.string_calls and len(args) == 1 and isinstance(args[0], ast.Constant):
        text = args[0].value  # Symbol('x'), Float('1.5'): names and numbers, not parsed
        if isinstance(text, str) and name == "Symbol":
            return 1
        if isinstance(text, str) and (decimal := _DECIMAL.fullmatch(text)):
            return _decimal_bits(decimal)
    if name not in grammar.calls:
        raise _Refused
    if name in _FACTORIALS:
        return _factorial_bits(args, grammar)
    return max(1, sum(_bits(argument, grammar) for argument in args))


def _decimal_bits(decimal: re.Match[str]) -> int:
    """sympy builds ``Float('1e999999')`` exactly before rounding it (36 s for that one):
    a decimal literal costs its digits and its exponent, in bits."""
    exponent = abs(int(decimal["exponent"] or "0"))
    return 128 + 4 * (len(decimal["digits"]) + exponent)


def _factorial_bits(args: list[ast.expr], grammar: _Grammar) -> int:
    """sympy computes a factorial of a number at once: only constants up to 1000, or
    a bare symbol (which stays unevaluated), are allowed as its argument."""
    if len(args) != 1:
        raise _Refused
    (argument,) = args
    if isinstance(argument, ast.Call) and isinstance(argument.func, ast.Name):
        if argument.func.id == "Symbol":
            return _bits(argument, grammar)
    value = _constant(argument)
    if value is None or not 0 <= value <= _MAX_FACTORIAL:
        raise _Refused  # (9**64)!, factorial(factorial(10))
    return math.ceil(value * math.log2(value + 1)) + 1


def plain_expression(text: str, evaluator: Evaluator = "eval") -> bool:
    """Whether ``text`` is safe to hand to ``evaluator`` (``eval`` or sympy's
    ``parse_expr``): what it evaluates is an expression in the evaluator's grammar within
    the size bounds; for ``eval`` also nothing (``eval`` fails to parse it before running
    it)."""
    if len(text) > _MAX_CHARS:
        return False
    grammar = _GRAMMARS[evaluator]
    codes = _python_code(text) if evaluator == "eval" else _sympy_code(text)
    try:
        parsed = [_parse(code) for code in codes]
        if evaluator == "parse_expr" and None in parsed:
            return False  # may compile with the scorer's local_dict (module docstring)
        trees = [tree for tree in parsed if tree is not None]
        return all(_within_depth(t) and _bits(t.body, grammar) <= _MAX_BITS for t in trees)
    except _Refused:
        return False


def refusal(dataset: str, entry: Mapping[str, Any], answer: str) -> str | None:
    """Why ``answer`` must not reach ``dataset``'s scorer for ``entry`` (``None``: it may).
    A composite dataset scores with the entry's source dataset, which decides."""
    metadata = entry.get("metadata")
    source = metadata.get("source_dataset") if isinstance(metadata, Mapping) else None
    evaluator = EVALUATING_DATASETS.get(dataset) or EVALUATING_DATASETS.get(str(source))
    if evaluator is None or plain_expression(answer, evaluator):
        return None
    return (
        f"refused: the scorer would {evaluator} this answer as code outside plain "
        "arithmetic or past the size bounds; scored as an answer it cannot parse"
    )
