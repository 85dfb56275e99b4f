"""``MCPEnvironment``: the base class of environments whose tools are an MCP server's.

A subclass says which server to run (:meth:`MCPEnvironment.server`), optionally fills
the working directory (:meth:`MCPEnvironment.prepare_workdir`) and loads tasks; the base
starts or reaches the server at reset, offers its listed tools plus a terminal ``answer``
tool, forwards the calls, and scores with a :class:`~envhub_mcp.scoring.Scorer`.

Server lifetime: by default each episode gets its own server process and its own fresh
working directory (stateful servers, such as git's, write to it), closed with the
episode. ``shared_server=True`` keeps one connection per process for all episodes of the
same class and server (cheaper, for stateless servers), closed by ``aclose_shared``; a
shared server that died is started again by the next episode.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import mcp_types

from envhub import Budgets, Environment, Reward, Task, ToolSpec, tool
from envhub.errors import EnvironmentFailure, NotDeterministic
from envhub.types import Message
from envhub_mcp.connection import ServerConnection, ServerToolError, mcp_loop
from envhub_mcp.scoring import CallRecord, Scorer
from envhub_mcp.servers import HttpServer, StdioServer
from envhub_mcp.tools import render_result, server_tool

__all__ = ["MCPEnvironment"]

ANSWER_TOOL = "answer"


@dataclass
class _Shared:
    connection: ServerConnection
    workdir: Path
    tools: list[mcp_types.Tool]


# shared connections by (class, server template); only touched on the MCP loop thread
_SHARED: dict[tuple[type, str], _Shared] = {}
# what each (class, server template) listed, for listings before any episode
_LISTED: dict[tuple[type, str], list[mcp_types.Tool]] = {}
_SHARED_LOCK: asyncio.Lock | None = None


def _shared_lock() -> asyncio.Lock:
    global _SHARED_LOCK
    if _SHARED_LOCK is None:
        _SHARED_LOCK = asyncio.Lock()
    return _SHARED_LOCK


def _remove_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


class MCPEnvironment(Environment):
    """An environment whose tools are the tools an MCP server lists, plus ``answer``.

    Subclasses implement :meth:`server` and :meth:`load_tasks`; the constructor takes the
    scoring (``reward``), the server lifetime (``shared_server``) and ``startup_timeout_s``.
    """

    budgets: ClassVar[Budgets] = Budgets(max_turns=12, tool_timeout_s=30.0, episode_timeout_s=600.0)

    def __init__(
        self,
        *,
        reward: str = "exact",
        shared_server: bool = False,
        startup_timeout_s: float = 60.0,
    ) -> None:
        super().__init__()
        try:
            self.scorer = Scorer(reward)
        except ValueError as exc:  # a bad option: what make() and the server report as such
            raise TypeError(str(exc)) from None
        self.shared_server = bool(shared_server)
        self.startup_timeout_s = float(startup_timeout_s)
        self.submitted: str | None = None
        self.transcript: list[CallRecord] = []
        self._connection: ServerConnection | None = None
        self._workdir: Path | None = None  # this episode's own (not a shared server's)
        self._tools: dict[str, ToolSpec] | None = None

    # -- what a subclass provides -----------------------------------------------------------

    def server(self) -> StdioServer | HttpServer:
        """The server to run or reach; ``{workdir}`` in it stands for the working directory."""
        raise NotImplementedError(f"{type(self).__name__} must implement server()")

    async def prepare_workdir(self, workdir: Path) -> None:
        """Fill a new (empty) working directory before its server starts; by default
        nothing. Runs once per episode, or once per shared server."""

    # -- episode -------------------------------------------------------------------------

    async def reset(self, task: Task) -> list[Message]:
        messages = await super().reset(task)
        self.submitted = None
        self.transcript = []
        template = self.server()
        if self.shared_server:
            self._connection, tools = await mcp_loop().run(self._open_shared(template))
        else:
            self._workdir = Path(tempfile.mkdtemp(prefix="envhub-mcp-"))
            await self.prepare_workdir(self._workdir)
            self._connection = ServerConnection(template.at(self._workdir), cwd=self._workdir)
            tools = await self._connection.open(self.startup_timeout_s)
        self._tools = self._specs_for(tools)
        return messages

    def _specs_for(self, tools: list[mcp_types.Tool]) -> dict[str, ToolSpec]:
        own = type(self).tool_specs()
        clash = sorted(t.name for t in tools if t.name in own)
        if clash:
            raise EnvironmentFailure(
                f"the MCP server lists {', '.join(clash)}, a name this environment reserves "
                "for its own tool"
            )
        return {**{t.name: server_tool(t) for t in tools}, **own}

    async def _open_shared(
        self, template: StdioServer | HttpServer
    ) -> tuple[ServerConnection, list[mcp_types.Tool]]:
        key = (type(self), template.model_dump_json())
        async with _shared_lock():
            shared = _SHARED.get(key)
            if shared is not None and shared.connection.alive:
                return shared.connection, shared.tools
            if shared is not None:  # its server died: start a fresh one in a fresh directory
                del _SHARED[key]
                await shared.connection.close()
                await asyncio.to_thread(_remove_dir, shared.workdir)
            workdir = Path(tempfile.mkdtemp(prefix="envhub-mcp-shared-"))
            try:
                await self.prepare_workdir(workdir)
                connection = ServerConnection(template.at(workdir), cwd=workdir)
                tools = await connection.open(self.startup_timeout_s)
            except BaseException:
                await asyncio.to_thread(_remove_dir, workdir)
                raise
            _SHARED[key] = _Shared(connection, workdir, tools)
            return connection, tools

    def episode_tools(self) -> Mapping[str, ToolSpec]:
        """After reset, the tools this episode's server listed; before (for listings), the
        tools of this class's server as listed once per process: a shared server is
        opened and kept, a per-episode one is started in a scratch directory and stopped.
        Blocks; not to be called on the MCP loop thread."""
        if self._tools is not None:
            return self._tools
        template = self.server()
        key = (type(self), template.model_dump_json())
        tools = _LISTED.get(key)
        if tools is None:
            tools = mcp_loop().call(self._list_tools(template))
            _LISTED[key] = tools
        return self._specs_for(tools)

    async def _list_tools(self, template: StdioServer | HttpServer) -> list[mcp_types.Tool]:
        if self.shared_server:
            return (await self._open_shared(template))[1]
        workdir = Path(tempfile.mkdtemp(prefix="envhub-mcp-list-"))
        try:
            await self.prepare_workdir(workdir)
            connection = ServerConnection(template.at(workdir), cwd=workdir)
            tools = await connection.open(self.startup_timeout_s)
            await connection.close()
            return tools
        finally:
            await asyncio.to_thread(_remove_dir, workdir)

    async def call_server_tool(self, tool: str, arguments: dict[str, Any]) -> str:
        """Forward one validated call to the server (the target of every server tool)."""
        if self._connection is None:
            raise EnvironmentFailure("call_server_tool before reset")
        result = await self._connection.call(tool, arguments)
        output = render_result(result)
        self.transcript.append(
            CallRecord(tool=tool, arguments=arguments, output=output, is_error=result.is_error)
        )
        if result.is_error:
            raise ServerToolError(output)
        return output

    @tool(terminal=True)
    async def answer(self, value: str) -> str:
        """Submit your final answer; this ends the episode.

        Args:
            value: The answer alone, as short as the question allows.
        """
        self.submitted = value
        return "answer recorded"

    async def snapshot(self) -> object | None:
        """``None``: a fork replays the episode's calls against a fresh server (its own
        process and working directory) or a shared one (declared stateless), and the
        session checks every answer, so a server that answers otherwise (a clock, a
        random id) fails the fork with :class:`~envhub.errors.NotDeterministic`. Refused
        at once for a server reached by URL that is not declared stateless: it keeps its
        own state, and a replay would run the episode's calls on it a second time."""
        if isinstance(self.server(), HttpServer) and not self.shared_server:
            raise NotDeterministic(
                f"{self.name} cannot fork: its MCP server is reached by URL and keeps its "
                "own state, so replaying this episode would run its calls on it again "
                "(declare a stateless server with shared_server=True to fork by replay)"
            )
        return None

    def reward(self) -> Reward:
        return self.scorer.score(self.task, self.transcript, self.submitted)

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None and not self.shared_server:
            await connection.close()
        workdir, self._workdir = self._workdir, None
        if workdir is not None:
            await asyncio.to_thread(_remove_dir, workdir)

    @classmethod
    async def aclose_shared(cls) -> None:
        await mcp_loop().run(_close_shared(cls))


async def _close_shared(cls: type) -> None:
    async with _shared_lock():
        for key in [k for k in _SHARED if issubclass(k[0], cls)]:
            shared = _SHARED.pop(key)
            await shared.connection.close()
            await asyncio.to_thread(_remove_dir, shared.workdir)
