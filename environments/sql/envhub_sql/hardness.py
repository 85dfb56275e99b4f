"""Spider's hardness levels (easy/medium/hard/extra), computed from a sqlglot parse.

Mirrors ``eval_hardness`` of the Spider evaluation: it counts clause components
(WHERE, GROUP BY, ORDER BY, LIMIT, joins, OR, LIKE), nested queries and set operations,
and "other" complexity (several aggregates, columns, conditions or group keys).
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp

__all__ = ["hardness"]


def _conditions(node: exp.Expression | None) -> int:
    if node is None:
        return 0
    if isinstance(node, exp.Connector):
        return _conditions(node.left) + _conditions(node.right)
    return 1


def _select_counts(select: exp.Select) -> tuple[int, int]:
    """(component1, others) of one SELECT, ignoring its subqueries."""
    where = select.args.get("where")
    group = select.args.get("group")
    joins = select.args.get("joins") or []
    component1 = sum(
        1 for part in ("where", "group", "order", "limit") if select.args.get(part) is not None
    ) + len(joins)
    own = [n for n in select.walk(prune=lambda n: n is not select and isinstance(n, exp.Query))]
    component1 += sum(isinstance(n, exp.Or) for n in own) + sum(
        isinstance(n, exp.Like) for n in own
    )
    aggregates = sum(isinstance(n, exp.AggFunc) for n in own)
    others = sum(
        (
            aggregates > 1,
            len(select.expressions) > 1,
            _conditions(where.this if where else None) > 1,
            len(group.expressions) > 1 if group else False,
        )
    )
    return component1, others


def hardness(sql: str) -> str:
    statement = sqlglot.parse_one(sql, read="sqlite")
    selects = list(statement.find_all(exp.Select))
    set_ops = len(list(statement.find_all(exp.Union, exp.Intersect, exp.Except)))
    component2 = set_ops + max(0, len(selects) - 1 - set_ops)
    outer = selects[0]
    component1, others = _select_counts(outer)
    if component1 <= 1 and others == 0 and component2 == 0:
        return "easy"
    if (others <= 2 and component1 <= 1 and component2 == 0) or (
        component1 <= 2 and others < 2 and component2 == 0
    ):
        return "medium"
    if (
        (others > 2 and component1 <= 2 and component2 == 0)
        or (2 < component1 <= 3 and others <= 2 and component2 == 0)
        or (component1 <= 1 and others == 0 and component2 <= 1)
    ):
        return "hard"
    return "extra"
