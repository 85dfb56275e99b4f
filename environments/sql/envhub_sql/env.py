"""The ``sql`` environment: explore a read-only SQLite database, then submit one query."""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from envhub import Budgets, Environment, Reward, Task, TaskSet, tool
from envhub.errors import InvalidRequest
from envhub.rewards.sql import COMPARATORS, execution_match, has_order_by
from envhub.sandboxes import resolve_backend
from envhub_sql.catalog import Database, resolve_database
from envhub_sql.connection import QueryError, QueryResult, open_readonly, run_query
from envhub_sql.executor import QueryExecutor, make_executor
from envhub_sql.guard import RejectedQuery
from envhub_sql.render import describe, format_result, list_tables_text, table_names
from envhub_sql.userdata import load_user_tasks
from envhub_sql.workers import worker_pool

__all__ = ["SqlEnv"]

#: a submission with more rows than this is invalid (protects the reward from memory bombs)
MAX_SUBMISSION_ROWS = 100_000
#: gold queries get BIRD's 30 s: a slow user gold must not turn into a zero reward
GOLD_TIMEOUT_S = 30.0


@dataclass
class Submission:
    query: str
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    error: str | None = None


@lru_cache(maxsize=8192)
def gold_rows(path: str, sql: str) -> tuple[tuple[Any, ...], ...]:
    """The gold query's rows; deterministic for a read-only database, so cached per process."""
    conn = open_readonly(path)
    try:
        return tuple(run_query(conn, sql, timeout_s=GOLD_TIMEOUT_S).rows)
    finally:
        conn.close()


#: whether a gold query sorts (Spider's order rule); gold SQL repeats, so parse it once
gold_is_ordered = lru_cache(maxsize=8192)(has_order_by)


class SqlEnv(Environment):
    """Text-to-SQL in the spirit of SkyRL-SQL and BIRD, scored by execution match.

    Options: ``tasks``/``db_root`` load a Spider/BIRD dataset instead of the shipped tasks;
    ``comparator`` is ``bird`` (set equality, default), ``spider`` or ``strict``;
    ``invalid_reward`` scores a missing or failing submission (SkyRL uses -1);
    ``query_timeout_s`` and ``max_rows`` bound ``run_sql``; ``sandbox`` (``local``,
    ``bwrap`` or ``docker``, default ``ENVHUB_SANDBOX``:
    :func:`envhub.sandboxes.resolve_backend`) runs model-written queries in a sandbox;
    with neither, they run in the process's query workers.
    """

    name = "sql"
    version = "0.1.0"
    budgets = Budgets(max_turns=10, tool_timeout_s=30.0, episode_timeout_s=300.0)
    # scoring only: data paths, the sandbox and the query limits are the operator's
    client_options: ClassVar[dict[str, Any]] = {
        "comparator": Literal[tuple(COMPARATORS)],
        "invalid_reward": Annotated[float, Field(ge=-1.0, le=1.0)],
    }

    def __init__(
        self,
        tasks: str | None = None,
        db_root: str | None = None,
        comparator: str = "bird",
        invalid_reward: float = 0.0,
        query_timeout_s: float = 5.0,
        max_rows: int = 50,
        sandbox: str | None = None,
    ) -> None:
        super().__init__()
        if (tasks is None) != (db_root is None):
            raise InvalidRequest("give both tasks= (a Spider/BIRD question file) and db_root=")
        if comparator not in COMPARATORS:
            raise InvalidRequest(
                f"comparator must be one of {', '.join(COMPARATORS)}, not {comparator!r}"
            )
        self.tasks_path = tasks
        self.db_root = db_root
        self.comparator = comparator
        self.invalid_reward = float(invalid_reward)
        self.query_timeout_s = float(query_timeout_s)
        self.max_rows = int(max_rows)
        # the common rule (option, ENVHUB_SANDBOX); neither: in-process query workers
        self.sandbox = resolve_backend(sandbox, default=None)
        self.database: Database | None = None
        self.executor: QueryExecutor | None = None
        self.submission: Submission | None = None
        self._conn: sqlite3.Connection | None = None

    def load_tasks(self) -> TaskSet:
        if self.tasks_path is not None and self.db_root is not None:
            return load_user_tasks(self.tasks_path, self.db_root)
        return TaskSet.from_package("envhub_sql", "data/tasks.jsonl")

    async def reset(self, task: Task) -> list[dict[str, Any]]:
        messages = await super().reset(task)
        # the first use of a shipped database builds it (seconds): keep that off the loop
        self.database = await asyncio.to_thread(
            resolve_database, task.metadata["db_id"], self.db_root
        )
        self.executor = make_executor(self.database.path, self.sandbox)
        return messages

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            assert self.database is not None, "reset() must run before tools"
            self._conn = open_readonly(self.database.path)
        return self._conn

    # -- tools ------------------------------------------------------------------------------

    @tool
    def list_tables(self) -> str:
        """List the tables of the database with their row counts."""
        notes = self.database.notes.tables if self.database and self.database.notes else None
        return list_tables_text(self.conn, notes)

    @tool
    def describe_table(self, name: str) -> str:
        """Show a table's CREATE statement (keys included), column notes and 3 sample rows.

        Args:
            name: The table name, as list_tables shows it.
        """
        tables = table_names(self.conn)
        if name not in tables:
            raise ValueError(f"no table named {name!r}; tables: {', '.join(tables)}")
        notes = self.database.notes if self.database else None
        return describe(
            self.conn, name, notes.tables.get(name) if notes else None, self.query_timeout_s
        )

    async def _execute(self, query: str, max_rows: int) -> QueryResult:
        assert self.executor is not None, "reset() must run before tools"
        return await self.executor.run(query, timeout_s=self.query_timeout_s, max_rows=max_rows)

    @tool
    async def run_sql(self, query: str) -> str:
        """Run a read-only SQL query (one SELECT or WITH statement) and show up to 50 rows.

        Args:
            query: A single SQLite SELECT statement, e.g. "SELECT name FROM artist LIMIT 5".
        """
        try:
            result = await self._execute(query, self.max_rows)
        except RejectedQuery as exc:
            raise ValueError(f"query rejected: {exc}") from None
        return format_result(result, self.max_rows)  # a QueryError reaches the model as is

    @tool(terminal=True)
    async def submit_sql(self, query: str) -> str:
        """Submit the final SQL query that answers the question; this ends the episode.

        Args:
            query: A single SQLite SELECT statement whose result answers the question.
        """
        # recorded once its outcome is known: a call cut short (timeout, infrastructure)
        # must not leave an empty result behind to be scored
        submission = Submission(query=query)
        try:
            result = await self._execute(query, MAX_SUBMISSION_ROWS)
        except RejectedQuery as exc:
            submission.error = f"query rejected: {exc}"
        except QueryError as exc:
            submission.error = str(exc)
        else:
            if result.truncated:
                submission.error = f"the result has more than {MAX_SUBMISSION_ROWS} rows"
            submission.rows = result.rows
        self.submission = submission
        if submission.error:
            return f"Submission recorded but invalid: {submission.error}"
        return f"Submission recorded ({len(submission.rows)} rows)."

    # -- forking ----------------------------------------------------------------------------

    async def snapshot(self) -> dict[str, Any]:
        """The database, by reference, and the submission. Nothing an episode does can
        change its database (opened read-only, ``query_only``, and an authorizer that
        allows only reads: :mod:`envhub_sql.connection`), so a child shares the file
        instead of taking a copy with sqlite's backup API, which would cost a pass over
        the database and give the same bytes; the fork is O(1) in the episode's length
        and in the database's size. Each child opens its own connection and executor."""
        return self.copied_state("submission", shared=("database",))

    async def restore(self, state: object) -> None:
        self.restore_copied(state)
        assert self.database is not None, "snapshot() runs after reset()"
        self.executor = make_executor(self.database.path, self.sandbox)

    # -- scoring ----------------------------------------------------------------------------

    def reward(self) -> Reward:
        submission = self.submission
        if submission is None or submission.error is not None:
            return Reward(
                value=self.invalid_reward,
                components={"submitted": float(submission is not None), "executed": 0.0},
                info={
                    "comparator": self.comparator,
                    "error": submission.error if submission else None,
                },
            )
        assert self.database is not None
        gold_sql = str(self.task.answer)
        gold = gold_rows(str(self.database.path), gold_sql)
        ordered = gold_is_ordered(gold_sql)
        results = {
            name: execution_match(submission.rows, gold, name, order_matters=ordered)
            for name in COMPARATORS
        }
        return Reward(
            value=results[self.comparator],
            components={"submitted": 1.0, "executed": 1.0, **results},
            info={
                "comparator": self.comparator,
                "pred_rows": len(submission.rows),
                "gold_rows": len(gold),
            },
        )

    async def close(self) -> None:
        if self.executor is not None:
            await self.executor.close()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    @classmethod
    async def aclose_shared(cls) -> None:
        """Stop the process's idle query workers; a later query starts new ones."""
        await asyncio.to_thread(worker_pool().close)
