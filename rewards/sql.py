"""Execution match for text-to-SQL: compare the rows of a predicted and a gold query.

Three comparators, as the benchmarks define them:

- ``bird``: ``set(pred) == set(gold)`` over row tuples as returned (BIRD EX, SkyRL-SQL).
  Column order matters, row order and duplicates do not.
- ``spider``: Spider test-suite execution match: same number of rows, columns may be
  permuted, rows compared as multisets, or as lists when the gold query has ORDER BY.
- ``strict``: the exact list of row tuples.

The functions take rows that are already fetched, so they stay pure; running the
queries belongs to the environment. sqlglot (``pip install 'envhub-rl[sql]'``) is imported
only by :func:`has_order_by`, which Spider's order rule calls when ``order_matters`` is not
given; everything else works on a core install.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Literal

__all__ = [
    "COMPARATORS",
    "Comparator",
    "Rows",
    "bird_match",
    "execution_match",
    "has_order_by",
    "spider_match",
    "strict_match",
]

Rows = Sequence[Sequence[Any]]
"""A query result: rows of column values, as sqlite3 returns them."""
Comparator = Literal["bird", "spider", "strict"]


def _tuples(rows: Rows) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in rows]


def bird_match(pred: Rows, gold: Rows) -> bool:
    """BIRD's EX: the sets of row tuples are equal."""
    return set(_tuples(pred)) == set(_tuples(gold))


def strict_match(pred: Rows, gold: Rows) -> bool:
    """The same rows, in the same order, with the same columns."""
    return _tuples(pred) == _tuples(gold)


def _column_permutations(
    pred: list[tuple[Any, ...]], gold: list[tuple[Any, ...]]
) -> list[list[int]]:
    """Assignments gold column -> distinct pred column whose value multisets agree."""
    width = len(gold[0])
    pred_columns = [Counter(row[i] for row in pred) for i in range(width)]
    gold_columns = [Counter(row[j] for row in gold) for j in range(width)]
    options = [
        [i for i in range(width) if pred_columns[i] == gold_columns[j]] for j in range(width)
    ]
    found: list[list[int]] = []

    def assign(j: int, used: list[int]) -> None:
        if j == width:
            found.append(list(used))
            return
        for i in options[j]:
            if i not in used:
                used.append(i)
                assign(j + 1, used)
                used.pop()

    assign(0, [])
    return found


def spider_match(pred: Rows, gold: Rows, *, order_matters: bool = False) -> bool:
    """Spider test-suite execution match (column permutations, multisets or lists)."""
    pred_rows, gold_rows = _tuples(pred), _tuples(gold)
    if len(pred_rows) != len(gold_rows):
        return False
    if not gold_rows:
        return True
    if len(pred_rows[0]) != len(gold_rows[0]):
        return False
    gold_multiset = None if order_matters else Counter(gold_rows)
    for permutation in _column_permutations(pred_rows, gold_rows):
        permuted = [tuple(row[i] for i in permutation) for row in pred_rows]
        if order_matters and permuted == gold_rows:
            return True
        if not order_matters and Counter(permuted) == gold_multiset:
            return True
    return False


def has_order_by(sql: str) -> bool:
    """Whether the outermost query of ``sql`` sorts its result (Spider's order rule).

    Raises ``ModuleNotFoundError`` naming the install command when sqlglot is missing.
    """
    try:
        import sqlglot
        from sqlglot.errors import ParseError, TokenError
    except ImportError:
        raise ModuleNotFoundError(
            "Spider's order rule parses the gold SQL with sqlglot, which is not installed: "
            "pip install 'envhub-rl[sql]' (or pass order_matters=True/False)",
            name="sqlglot",
        ) from None

    try:
        statement = sqlglot.parse_one(sql, read="sqlite")
    except (ParseError, TokenError):
        return "order by" in " ".join(sql.lower().split())
    return statement.args.get("order") is not None


COMPARATORS: dict[str, Callable[..., bool]] = {
    "bird": bird_match,
    "spider": spider_match,
    "strict": strict_match,
}


def execution_match(
    pred: Rows,
    gold: Rows,
    comparator: Comparator | str = "bird",
    *,
    order_matters: bool | None = None,
    gold_sql: str | None = None,
) -> float:
    """1.0 if ``pred`` matches ``gold`` under ``comparator``, else 0.0.

    For ``spider``, ``order_matters`` defaults to whether ``gold_sql`` has ORDER BY.
    """
    if comparator not in COMPARATORS:
        raise ValueError(
            f"unknown comparator {comparator!r}; choose one of {', '.join(COMPARATORS)}"
        )
    if comparator == "spider":
        if order_matters is None:
            order_matters = has_order_by(gold_sql) if gold_sql else False
        return float(spider_match(pred, gold, order_matters=order_matters))
    return float(COMPARATORS[comparator](pred, gold))
