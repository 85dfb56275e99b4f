"""The ``mcp`` environment: any MCP server plus a task file, or a shipped task set.

Without options it is the ``git-history`` task set. An operator wraps another server
with ``command=`` (or ``url=``) and ``tasks=`` (a JSONL/Parquet file of tasks with
prompts, answers and gold actions). Clients of ``envhub serve`` may choose only
``task_set``: a command, a URL, a task path, a working-directory template or a reward
module would let them run code or read files on the server's machine.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any, ClassVar, Literal

from envhub import TaskSet
from envhub_mcp.base import MCPEnvironment
from envhub_mcp.servers import HttpServer, StdioServer, parse_server
from envhub_mcp.tasksets import TASK_SETS, ShippedTaskSet

__all__ = ["DEFAULT_TASK_SET", "MCPEnv"]

DEFAULT_TASK_SET = "git-history"
TaskSetName = Literal["git-history", "time-zones"]


class MCPEnv(MCPEnvironment):
    """Any MCP server as an environment (see the module docstring for the options)."""

    name = "mcp"
    version = "0.1.0"
    client_options: ClassVar[dict[str, Any]] = {"task_set": TaskSetName}

    def __init__(
        self,
        task_set: str | None = None,
        *,
        command: str | list[str] | None = None,
        url: str | None = None,
        tasks: str | None = None,
        workdir_from: str | None = None,
        reward: str = "exact",
        shared_server: bool | None = None,
        startup_timeout_s: float = 60.0,
    ) -> None:
        custom = command is not None or url is not None
        if custom and task_set is not None:
            raise TypeError("task_set names a shipped server; it cannot be combined with "
                            "command= or url=")
        if custom and tasks is None:
            raise TypeError("a server given by command= or url= needs tasks= (a task file)")
        if not custom and (tasks is not None or workdir_from is not None):
            raise TypeError("tasks= and workdir_from= go with command= or url=")
        self.shipped: ShippedTaskSet | None = None
        self._server: StdioServer | HttpServer
        if custom:
            try:
                self._server = parse_server(command, url)
            except ValueError as exc:
                raise TypeError(str(exc)) from None
        else:
            name = task_set or DEFAULT_TASK_SET
            if name not in TASK_SETS:
                raise TypeError(f"unknown task_set {name!r}; shipped: {', '.join(TASK_SETS)}")
            self.shipped = TASK_SETS[name]
            self._server = self.shipped.server
        default_shared = self.shipped.shared_server if self.shipped is not None else False
        super().__init__(
            reward=reward,
            shared_server=default_shared if shared_server is None else shared_server,
            startup_timeout_s=startup_timeout_s,
        )
        self.tasks_path = tasks
        self.workdir_from = Path(workdir_from) if workdir_from is not None else None
        if self.workdir_from is not None and not self.workdir_from.is_dir():
            raise TypeError(f"workdir_from={workdir_from!r} is not a directory")

    def load_tasks(self) -> TaskSet:
        if self.shipped is not None:
            return TaskSet.from_package("envhub_mcp.tasksets", self.shipped.resource)
        assert self.tasks_path is not None
        return TaskSet.from_file(self.tasks_path)

    def server(self) -> StdioServer | HttpServer:
        return self._server

    async def prepare_workdir(self, workdir: Path) -> None:
        if self.shipped is not None and self.shipped.prepare_workdir is not None:
            await self.shipped.prepare_workdir(workdir)
        elif self.workdir_from is not None:
            await asyncio.to_thread(
                shutil.copytree, self.workdir_from, workdir, symlinks=True, dirs_exist_ok=True
            )
