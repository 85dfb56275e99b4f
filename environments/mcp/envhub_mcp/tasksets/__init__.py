"""The task sets shipped with envhub-rl-mcp, each over a real MCP server from PyPI that runs
offline: ``git-history`` (``mcp-server-git`` over a repository built deterministically at
first use) and ``time-zones`` (``mcp-server-time``, converting between zones without
daylight saving time, so the answers hold on any date).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from envhub_mcp.servers import WORKDIR, StdioServer
from envhub_mcp.tasksets import git_history

__all__ = ["TASK_SETS", "ShippedTaskSet"]


@dataclass(frozen=True)
class ShippedTaskSet:
    """A task file in this package plus the server its tasks are about."""

    name: str
    resource: str  # a JSONL file in this package
    server: StdioServer
    shared_server: bool  # a stateless server is started once per process
    prepare_workdir: Callable[[Path], Awaitable[None]] | None = None


TASK_SETS: dict[str, ShippedTaskSet] = {
    "git-history": ShippedTaskSet(
        name="git-history",
        resource="git_history.jsonl",
        # the console script's module, run by this interpreter: no reliance on PATH
        server=StdioServer(argv=(sys.executable, "-m", "mcp_server_git", "--repository", WORKDIR)),
        shared_server=False,  # its tools commit, reset and check out: one copy per episode
        prepare_workdir=git_history.prepare_workdir,
    ),
    "time-zones": ShippedTaskSet(
        name="time-zones",
        resource="time_zones.jsonl",
        server=StdioServer(
            argv=(sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC")
        ),
        shared_server=True,
    ),
}
