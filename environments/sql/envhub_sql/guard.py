"""The read-only gate: only one SELECT (or WITH ... SELECT) statement gets through.

sqlglot parses the query so the model gets a precise, readable reason for a rejection.
The length is checked before parsing (parsing costs about 1 s per 100 kB of hostile SQL),
and text sqlite cannot take (NUL characters, unpaired surrogates) is refused with a
reason instead of failing inside the driver. The gate is the first layer only: the
connection (:mod:`envhub_sql.connection`) is read-only and its sqlite authorizer denies
anything but reads even if a query slipped past.
"""

from __future__ import annotations

from functools import lru_cache

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from envhub_sql.connection import FORBIDDEN_FUNCTIONS, MAX_SQL_BYTES

__all__ = ["RejectedQuery", "check_query"]

_WRITE_NODES: tuple[type[exp.Expression], ...] = (
    exp.Insert,
    exp.Update,
    exp.Delete,
    exp.Merge,
    exp.Create,
    exp.Drop,
    exp.Alter,
    exp.Command,
    exp.Pragma,
    exp.Attach,
    exp.Detach,
    exp.Transaction,
    exp.Commit,
    exp.Rollback,
    exp.Set,
    exp.Use,
)


class RejectedQuery(ValueError):
    """The query is not a single read-only SELECT; the message says why."""


def _statement_kind(node: exp.Expression) -> str:
    if isinstance(node, exp.Command):
        return str(node.this).upper()
    return node.key.upper()


@lru_cache(maxsize=4096)
def check_query(query: str) -> str:
    """Return the stripped query if it is one read-only SELECT/WITH statement, else raise.

    Cached: parsing is pure-Python work (~0.5 ms), and the queries of a GRPO group or of
    the reference policy repeat. Rejections raise, so they are never cached.
    """
    try:
        size = len(query.encode("utf-8"))
    except UnicodeEncodeError:
        raise RejectedQuery(
            "the query contains characters that are not valid Unicode (unpaired surrogates)"
        ) from None
    if size > MAX_SQL_BYTES:
        raise RejectedQuery(f"the query is {size} bytes long; the limit is {MAX_SQL_BYTES} bytes")
    if "\x00" in query:
        raise RejectedQuery("the query contains a NUL character")
    text = query.strip()
    if not text:
        raise RejectedQuery("empty query")
    try:
        statements = [s for s in sqlglot.parse(text, read="sqlite") if s is not None]
    except ParseError as exc:
        where = exc.errors[0] if exc.errors else {}
        detail = str(where.get("description") or exc).split(". Line")[0]
        position = f" (line {where['line']}, column {where['col']})" if "line" in where else ""
        raise RejectedQuery(f"could not parse the query: {detail}{position}") from None
    except TokenError as exc:
        raise RejectedQuery(f"could not parse the query: {exc}") from None
    except RecursionError:
        raise RejectedQuery("the query is nested too deeply to check") from None
    if len(statements) != 1:
        raise RejectedQuery(
            f"only a single statement is allowed, found {len(statements)}; "
            "remove the extra statements (and any ';' between them)"
        )
    statement = statements[0]
    if not isinstance(statement, exp.Query):
        raise RejectedQuery(
            f"only read-only SELECT (or WITH ... SELECT) queries are allowed, "
            f"not {_statement_kind(statement)}"
        )
    for node in statement.walk():
        if isinstance(node, _WRITE_NODES):
            raise RejectedQuery(
                f"only read-only queries are allowed; {_statement_kind(node)} is not permitted"
            )
        if isinstance(node, exp.Func):
            name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
            if name in FORBIDDEN_FUNCTIONS:
                raise RejectedQuery(f"function {name}() is not allowed")
    return text
