"""Where model-written queries are gated and run: in a worker process of the server, or
in a sandbox.

Both executors first pass the query through the sqlglot gate (:func:`check_query`, in a
worker thread: parsing is CPU work) and then run the same code
(:mod:`envhub_sql.connection`): by default in one of the server's query worker processes
(:mod:`envhub_sql.workers`), which is killed if the query outlives its limit; in a
sandbox its source runs under ``python3`` against the session's private copy of the
database, so a sqlite bug reachable from SQL would hit a throwaway, resource-limited,
network-less process rather than the server.

Whatever a query does is the model's outcome (an error the model reads); only a runner
that cannot start or open its database is an infrastructure failure (``SandboxError``,
which masks the episode).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from envhub.errors import SandboxError
from envhub_sql.connection import (
    SETUP_FAILED,
    QueryError,
    QueryResult,
    QueryTimeout,
    decode_result,
)
from envhub_sql.guard import check_query
from envhub_sql.workers import RUNNER, worker_pool

if TYPE_CHECKING:
    from envhub.sandboxes import Sandbox

__all__ = ["QueryExecutor", "SandboxExecutor", "WorkerExecutor", "make_executor"]

_SANDBOX_DB = "db.sqlite"
_SANDBOX_MEMORY = "512MiB"
#: exit statuses that mean the runner never ran: its setup failed, or no python3
_RUNNER_NOT_RUN = frozenset({SETUP_FAILED, 126, 127})


class QueryExecutor(Protocol):
    async def run(self, query: str, *, timeout_s: float, max_rows: int | None) -> QueryResult:
        """Gate and run ``query``; raises ``RejectedQuery`` or ``QueryError`` for the model."""
        ...

    async def close(self) -> None: ...


class WorkerExecutor:
    """Queries of one session, run by the process's worker pool (read-only connections
    to ``path`` live in the workers, so a session holds nothing of its own)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _run(self, query: str, timeout_s: float, max_rows: int | None) -> QueryResult:
        checked = check_query(query)  # in the worker thread too: one thread hop per call
        return worker_pool().run(self.path, checked, timeout_s=timeout_s, max_rows=max_rows)

    async def run(self, query: str, *, timeout_s: float, max_rows: int | None) -> QueryResult:
        return await asyncio.to_thread(self._run, query, timeout_s, max_rows)

    async def close(self) -> None:
        """Holds no resources."""


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
        argv = ["python3", "-c", RUNNER, _SANDBOX_DB, str(timeout_s), str(max_rows or 0)]
        # the runner stops itself at the limit (plus GRACE_S); the exec timeout, which also
        # covers starting python3 in the sandbox, is the backstop
        result = await sandbox.exec(argv, timeout=timeout_s + 10.0, stdin=checked)
        # running out of time or memory, or crashing the runner, is the query's doing: the
        # model reads it as an error. Only a runner that never ran is infrastructure.
        if result.timed_out:
            raise QueryTimeout.after(timeout_s)
        if result.oom_killed:
            raise QueryError(f"the query ran out of memory (limit {_SANDBOX_MEMORY})")
        if result.exit_code in _RUNNER_NOT_RUN:
            raise SandboxError(
                f"the sandboxed query runner could not run (exit code {result.exit_code}): "
                f"{result.stderr[-500:]}"
            )
        if result.exit_code != 0 or not result.stdout.strip():
            raise QueryError(
                f"the query crashed the process running it (exit code {result.exit_code})"
            )
        return decode_result(result.stdout)

    async def close(self) -> None:
        if self._sandbox is not None:
            await self._sandbox.close()
            self._sandbox = None


def make_executor(path: Path, sandbox: str | None) -> QueryExecutor:
    return WorkerExecutor(path) if sandbox is None else SandboxExecutor(path, sandbox)
