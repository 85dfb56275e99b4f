"""Helpers for plugin and integration tests: contract checks and a real server in a thread.

``call_tool``: one turn with one tool call, for tool tests.
``check_environment``: for every selected task, replaying the gold actions must score 1 and
doing nothing must score 0 (:mod:`envhub.rollout.check` runs both through the rollout
engine). ``serve_in_thread``: uvicorn on 127.0.0.1 for tests that need real HTTP.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from envhub.local import LocalEnvironment, make
from envhub.rollout.check import CheckFailure, CheckReport, check_tasks
from envhub.session import Session
from envhub.types import StepResult, ToolCall

__all__ = [
    "CheckFailure",
    "CheckReport",
    "call_tool",
    "check_environment",
    "check_tasks",
    "serve_in_thread",
]


def check_environment(
    env: str | LocalEnvironment,
    *,
    task_ids: Iterable[str] | None = None,
    split: str | None = None,
    limit: int | None = None,
    concurrency: int = 8,
    **options: Any,
) -> CheckReport:
    """Blocking check for tests: raises ``AssertionError`` listing the failing tasks."""
    local = env if isinstance(env, LocalEnvironment) else make(env, **options)
    ids = list(task_ids) if task_ids is not None else local.task_ids(split)
    if limit is not None:
        ids = ids[:limit]
    report = asyncio.run(check_tasks(local, ids, concurrency=concurrency))
    if not report.ok:
        lines = "\n".join(
            f"  {f.task_id} [{f.policy}] reward={f.reward} expected={f.expected} {f.detail}"
            for f in report.failures[:20]
        )
        raise AssertionError(f"{len(report.failures)} check failure(s) in {report.env}:\n{lines}")
    return report


@contextmanager
def serve_in_thread(app: Any, *, startup_timeout_s: float = 30.0) -> Iterator[str]:
    """Serve an ASGI app with a real uvicorn server on 127.0.0.1 (a free port) in a thread.

    Yields the base URL; the server shuts down (lifespan included) on exit. For tests and
    benchmarks that need a real HTTP server without a subprocess.
    """
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + startup_timeout_s
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=startup_timeout_s)
        sock.close()


async def call_tool(session: Session, tool: str, /, **arguments: Any) -> StepResult:
    """``await call_tool(session, "run_sql", query=...)``: one turn with one tool call."""
    call = ToolCall(id=f"call-{uuid.uuid4().hex[:12]}", name=tool, arguments=arguments)
    return await session.step([call])
