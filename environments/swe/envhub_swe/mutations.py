"""Procedural bugs: libcst rewrites of one expression or statement, formatting kept.

In the spirit of SWE-smith's procedural modifiers and mutmut's operators. A
:class:`Site` is one place a bug can go; :func:`find_sites` lists every site of a
module in source order (deterministic), :func:`apply_sites` rewrites the chosen ones.
Only code inside functions is mutated (module-level constants and imports would break
collection, which the generator rejects anyway).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import libcst as cst
from libcst.metadata import PositionProvider

__all__ = ["KINDS", "Site", "apply_sites", "find_sites"]

_COMPARISON_FLIPS: dict[type[cst.BaseCompOp], type[cst.BaseCompOp]] = {
    cst.LessThan: cst.GreaterThanEqual,
    cst.GreaterThanEqual: cst.LessThan,
    cst.GreaterThan: cst.LessThanEqual,
    cst.LessThanEqual: cst.GreaterThan,
    cst.Equal: cst.NotEqual,
    cst.NotEqual: cst.Equal,
    cst.Is: cst.IsNot,
    cst.IsNot: cst.Is,
    cst.In: cst.NotIn,
    cst.NotIn: cst.In,
}
_BINARY_SWAPS: dict[type[cst.BaseBinaryOp], type[cst.BaseBinaryOp]] = {
    cst.Add: cst.Subtract,
    cst.Subtract: cst.Add,
    cst.Multiply: cst.FloorDivide,
    cst.FloorDivide: cst.Multiply,
    cst.Modulo: cst.FloorDivide,
}

#: every kind of bug, as recorded in task metadata and instance ids
KINDS = (
    "flip_comparison",
    "flip_boolean",
    "change_operator",
    "off_by_one",
    "drop_condition",
    "negate_condition",
    "drop_statement",
    "swap_arguments",
    "change_constant",
    "change_return",
)


@dataclass(frozen=True)
class Site:
    """One place to inject one kind of bug: ``node`` is replaced by :meth:`mutate`."""

    kind: str
    node: cst.CSTNode
    line: int
    function: str

    def mutate(self) -> cst.CSTNode | cst.RemovalSentinel:
        return _MUTATORS[self.kind](self.node)


def _flip_comparison(node: Any) -> cst.CSTNode:
    target = node.comparisons[0]
    op = target.operator
    new_op = _COMPARISON_FLIPS[type(op)](
        whitespace_before=op.whitespace_before, whitespace_after=op.whitespace_after
    )
    return node.with_changes(
        comparisons=[target.with_changes(operator=new_op), *node.comparisons[1:]]
    )


def _flip_boolean(node: Any) -> cst.CSTNode:
    op = node.operator
    new = cst.Or if isinstance(op, cst.And) else cst.And
    return node.with_changes(
        operator=new(whitespace_before=op.whitespace_before, whitespace_after=op.whitespace_after)
    )


def _change_operator(node: Any) -> cst.CSTNode:
    op = node.operator
    return node.with_changes(
        operator=_BINARY_SWAPS[type(op)](
            whitespace_before=op.whitespace_before, whitespace_after=op.whitespace_after
        )
    )


def _plus_one(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``n`` -> ``n + 1`` for an integer literal ``n``, else ``expr + 1``."""
    if isinstance(expr, cst.Integer):
        return expr.with_changes(value=str(int(expr.value, 0) + 1))
    return cst.BinaryOperation(left=expr, operator=cst.Add(), right=cst.Integer("1"))


def _off_by_one(node: Any) -> cst.CSTNode:
    if isinstance(node, cst.Call):  # range(a, b) -> range(a, b + 1); range(n) -> range(n + 1)
        idx = 1 if len(node.args) >= 2 else 0
        arg = node.args[idx]
        args = list(node.args)
        args[idx] = arg.with_changes(value=_plus_one(arg.value))
        return node.with_changes(args=args)
    # a slice: shift its upper bound, or its lower bound when there is none
    if node.upper is not None:
        return node.with_changes(upper=_plus_one(node.upper))
    return node.with_changes(lower=_plus_one(node.lower))


def _drop_condition(node: Any) -> cst.CSTNode:
    return node.left  # "a and b" -> "a"


def _negate_condition(node: Any) -> cst.CSTNode:
    test = node.test
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return node.with_changes(test=test.expression)
    return node.with_changes(
        test=cst.UnaryOperation(operator=cst.Not(), expression=_parenthesize(test))
    )


def _parenthesize(expr: cst.BaseExpression) -> cst.BaseExpression:
    simple = (cst.Name, cst.Attribute, cst.Call, cst.Subscript)
    if isinstance(expr, simple) or expr.lpar:
        return expr
    return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _drop_statement(node: Any) -> cst.RemovalSentinel:
    return cst.RemovalSentinel.REMOVE


def _swap_arguments(node: Any) -> cst.CSTNode:
    args = list(node.args)
    first, second = args[0], args[1]
    args[0] = second.with_changes(comma=first.comma)
    args[1] = first.with_changes(comma=second.comma)
    return node.with_changes(args=args)


def _change_constant(node: Any) -> cst.CSTNode:
    if isinstance(node, cst.Name):  # True <-> False
        return node.with_changes(value="False" if node.value == "True" else "True")
    value = int(node.value, 0)
    return node.with_changes(value=str(value + 1 if value in (0, 1) else value - 1))


def _change_return(node: Any) -> cst.CSTNode:
    value = node.value
    if isinstance(value, cst.Name) and value.value in ("True", "False"):
        flipped = "False" if value.value == "True" else "True"
        return node.with_changes(value=value.with_changes(value=flipped))
    return node.with_changes(value=cst.Name("None"))


_MUTATORS = {
    "flip_comparison": _flip_comparison,
    "flip_boolean": _flip_boolean,
    "change_operator": _change_operator,
    "off_by_one": _off_by_one,
    "drop_condition": _drop_condition,
    "negate_condition": _negate_condition,
    "drop_statement": _drop_statement,
    "swap_arguments": _swap_arguments,
    "change_constant": _change_constant,
    "change_return": _change_return,
}


class _SiteFinder(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self) -> None:
        self.sites: list[Site] = []
        self.functions: list[str] = []

    def _add(self, kind: str, node: cst.CSTNode) -> None:
        if self.functions:
            line = self.get_metadata(PositionProvider, node).start.line
            self.sites.append(Site(kind, node, line, ".".join(self.functions)))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.functions.append(node.name.value)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.functions.pop()

    def visit_Comparison(self, node: cst.Comparison) -> None:
        if type(node.comparisons[0].operator) in _COMPARISON_FLIPS:
            self._add("flip_comparison", node)

    def visit_BooleanOperation(self, node: cst.BooleanOperation) -> None:
        self._add("flip_boolean", node)
        self._add("drop_condition", node)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if type(node.operator) in _BINARY_SWAPS and not _is_string(node.left):
            self._add("change_operator", node)

    def visit_Call(self, node: cst.Call) -> None:
        positional = [a for a in node.args if a.keyword is None and not a.star]
        if isinstance(node.func, cst.Name) and node.func.value == "range" and positional:
            if len(positional) == len(node.args) and len(node.args) <= 2:
                self._add("off_by_one", node)
        elif (
            len(positional) >= 2 and node.args[0] is positional[0] and node.args[1] is positional[1]
        ):
            self._add("swap_arguments", node)

    def visit_Slice(self, node: cst.Slice) -> None:
        if node.step is None and (node.upper is not None or node.lower is not None):
            self._add("off_by_one", node)

    def visit_If(self, node: cst.If) -> None:
        self._add("negate_condition", node)

    def visit_Integer(self, node: cst.Integer) -> None:
        try:
            int(node.value, 0)
        except ValueError:
            return
        self._add("change_constant", node)

    def visit_Name(self, node: cst.Name) -> None:
        if node.value in ("True", "False"):
            self._add("change_constant", node)

    def visit_Return(self, node: cst.Return) -> None:
        if node.value is not None and not (
            isinstance(node.value, cst.Name) and node.value.value == "None"
        ):
            self._add("change_return", node)

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        body = node.body
        if len(body) == 1 and isinstance(body[0], (cst.Expr, cst.Assign, cst.AugAssign)):
            if isinstance(body[0], cst.Expr) and isinstance(body[0].value, cst.BaseString):
                return  # a docstring
            self._add("drop_statement", node)


def _is_string(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, (cst.BaseString, cst.FormattedString))


def find_sites(module: cst.Module) -> list[Site]:
    """Every bug site of ``module``, in source order."""
    finder = _SiteFinder()
    cst.MetadataWrapper(module, unsafe_skip_copy=True).visit(finder)
    return finder.sites


class _Replacer(cst.CSTTransformer):
    def __init__(self, replacements: dict[int, cst.CSTNode | cst.RemovalSentinel]) -> None:
        self.replacements = replacements

    def on_leave(self, original_node: Any, updated_node: Any) -> Any:
        return self.replacements.get(id(original_node), updated_node)


def apply_sites(module: cst.Module, sites: list[Site]) -> str:
    """The module's source with every site in ``sites`` mutated (sites must not nest)."""
    replacements = {id(site.node): site.mutate() for site in sites}
    return module.visit(_Replacer(replacements)).code
