"""Where model-written queries are gated and run: in the server process, or in a sandbox.

Both executors first pass the query through the sqlglot gate (:func:`check_query`, in a
worker thread: parsing is CPU work) and then run the same code
(:mod:`envhub_sql.connection`): in-process in that same thread on a per-session
read-only connection; in a sandbox its source runs under ``python3`` against the
session's private copy of the database, so a sqlite bug reachable from SQL would hit a
throwaway, resource-limited, network-less process rather than the server.
"""

from __future__ import annotations

import asyncio
import sqlite3
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from envhub.errors import SandboxError
from envhub_sql.connection import (
    QueryError,
    QueryResult,
    QueryTimeout,
    decode_result,
    open_readonly,
    run_query,
)
from envhub_sql.guard import check_query

if TYPE_CHECKING:
    from envhub.sandboxes import Sandbox

__all__ = ["InProcessExecutor", "QueryExecutor", "SandboxExecutor", "make_executor"]

_SANDBOX_DB = "db.sqlite"
_SANDBOX_MEMORY = "512MiB"
_RUNNER = resources.files("envhub_sql").joinpath("connection.py").read_text("utf-8")


class QueryExecutor(Protocol):
    async def run(self, query: str, *, timeout_s: float, max_rows: int | None) -> QueryResult:
        """Gate and run ``query``; raises ``RejectedQuery`` or ``QueryError`` for the model."""
        ...

    async def close(self) -> None: ...


class InProcessExecutor:
    """A read-only connection per session, used from worker threads one call at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None

    def _run(self, query: str, timeout_s: float, max_rows: int | None) -> QueryResult:
        checked = check_query(query)  # in the worker thread too: one thread hop per call
        if self._conn is None:
            self._conn = open_readonly(self.path)
        return run_query(self._conn, checked, timeout_s=timeout_s, max_rows=max_rows)

    async def run(self, query: str, *, timeout_s: float, max_rows: int | None) -> QueryResult:
        return await asyncio.to_thread(self._run, query, timeout_s, max_rows)

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class SandboxExecutor:
    """One sandbox per session holding a copy of the database; one process per query."""

    def __init__(self, path: Path, backend: str) -> None:
        self.path = path
        self.backend = backend
        self._sandbox: Sandbox | None = None  # started on the first query
        self._lock = asyncio.Lock()

    async def _started(self) -> Sandbox:
        async with self._lock:
            if self._sandbox is None:
                from envhub.sandboxes import SandboxSpec, make_sandbox

                sandbox = make_sandbox(
                    SandboxSpec(image="python", memory=_SANDBOX_MEMORY, pids=16), self.backend
                )
                await sandbox.start()
                try:
                    await sandbox.write_file(_SANDBOX_DB, self.path.read_bytes(), mode=0o444)
                except BaseException:
                    await sandbox.close()
                    raise
                self._sandbox = sandbox
            return self._sandbox

    async def run(self, query: str, *, timeout_s: float, max_rows: int | None) -> QueryResult:
        checked = await asyncio.to_thread(check_query, query)
        sandbox = await self._started()
        argv = ["python3", "-c", _RUNNER, _SANDBOX_DB, str(timeout_s), str(max_rows or 0)]
        # the runner's own progress handler stops the query; the exec timeout is the backstop
        result = await sandbox.exec(argv, timeout=timeout_s + 10.0, stdin=checked)
        # running out of time or memory is the query's doing: the model reads it as an error
        if result.timed_out:
            raise QueryTimeout(
                f"the query ran longer than the {timeout_s:g} s limit and was stopped"
            )
        if result.oom_killed:
            raise QueryError(f"the query ran out of memory (limit {_SANDBOX_MEMORY})")
        if result.exit_code != 0 or not result.stdout.strip():
            raise SandboxError(
                f"the sandboxed query runner failed (exit code {result.exit_code}): "
                f"{result.stderr[-500:]}"
            )
        return decode_result(result.stdout)

    async def close(self) -> None:
        if self._sandbox is not None:
            await self._sandbox.close()
            self._sandbox = None


def make_executor(path: Path, sandbox: str | None) -> QueryExecutor:
    return InProcessExecutor(path) if sandbox is None else SandboxExecutor(path, sandbox)
