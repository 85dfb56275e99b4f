"""One client connection to an MCP server, with its failures sorted into the model's and
the infrastructure's.

The official SDK's ``mcp.Client`` is an async context manager whose task group must be
entered and left by one task, while an episode's reset, tool calls (each in its own
task under the session's timeout) and close come from different tasks, and sessions
from different event loops. So every connection is held open by a task on one
process-wide loop thread (:class:`envhub.runtime.loop_thread.LoopThread`), and callers reach it
from any loop; cancelling a caller (the session's tool timeout) cancels the call.

Failure contract of :meth:`ServerConnection.call`:

- the tool ran and reported an error (``isError``), or the server refused the call
  (a JSON-RPC error: unknown tool, invalid parameters): the result, or
  :class:`ServerToolError`; the model reads it as an error observation;
- the server is gone (process exited, connection closed or refused):
  :class:`~envhub.errors.SandboxError`, which the session re-raises and the rollout
  masks. A server that cannot start is a ``SandboxError`` from :meth:`open` as well.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import anyio
import mcp_types
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from envhub.errors import SandboxError, ToolError
from envhub.runtime.loop_thread import LoopThread
from envhub_mcp.servers import HttpServer, StdioServer

__all__ = ["ServerConnection", "ServerToolError", "mcp_loop"]

_MAX_TOOL_PAGES = 100  # tools/list pages read before giving up on a paginator that never ends
_STDERR_TAIL = 2000  # characters of a dead server's stderr quoted in the SandboxError
_CLOSE_WAIT_S = 15.0  # the SDK bounds its own shutdown (stdin close, SIGTERM, SIGKILL) below this

_log = logging.getLogger(__name__)
_loop_lock = threading.Lock()
_loop: LoopThread | None = None


def mcp_loop() -> LoopThread:
    """The loop thread every MCP connection of this process lives on (started on use)."""
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = LoopThread("envhub-mcp")
        return _loop


class ServerToolError(ToolError):
    """The server ran or refused the model's call and said why: an error observation."""


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    """The exceptions inside (nested) exception groups, which anyio task groups raise."""
    inner = getattr(exc, "exceptions", None)  # BaseExceptionGroup (a backport before 3.11)
    if isinstance(inner, tuple):
        for each in inner:
            yield from _leaves(each)
    else:
        yield exc


def _describe(exc: BaseException) -> str:
    leaf = next(_leaves(exc), exc)
    return f"{type(leaf).__name__}: {leaf}".strip()


def _connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` means the server or the connection to it is gone."""
    for leaf in _leaves(exc):
        if isinstance(leaf, MCPError) and leaf.code == mcp_types.CONNECTION_CLOSED:
            return True
        if isinstance(leaf, OSError | anyio.BrokenResourceError | anyio.ClosedResourceError
                      | anyio.EndOfStream):
            return True
        if type(leaf).__module__.startswith(("httpx", "httpcore")):
            return True  # the Streamable-HTTP transport's connection errors
    return False


class ServerConnection:
    """A connection to one server, opened by :meth:`open` and ended by :meth:`close`.

    A stdio server runs with ``cwd`` as its current directory; its stderr goes to a
    temporary file whose tail explains a crash.
    """

    def __init__(self, server: StdioServer | HttpServer, *, cwd: Path | None = None) -> None:
        self.server = server
        self.cwd = cwd
        self._client: Client | None = None
        self._holder: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._stderr: IO[str] | None = None
        self._lost: str | None = None

    @property
    def alive(self) -> bool:
        """Open and not known to be lost (a shared connection is replaced once it is not)."""
        return (
            self._client is not None
            and self._lost is None
            and self._holder is not None
            and not self._holder.done()
        )

    async def open(self, startup_timeout_s: float) -> list[mcp_types.Tool]:
        """Start (or reach) the server, initialise the session and list its tools.

        :class:`~envhub.errors.SandboxError` if that fails or takes over ``startup_timeout_s``
        seconds; nothing is left running then."""
        return await mcp_loop().run(self._open(startup_timeout_s))

    async def call(self, name: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        """Call a tool (see the module's failure contract)."""
        return await mcp_loop().run(self._call(name, arguments))

    async def close(self) -> None:
        """End the session and stop a stdio server; errors are recorded, not raised."""
        await mcp_loop().run(self._close())

    # -- on the MCP loop -------------------------------------------------------------------

    def _transport(self) -> Any:
        if isinstance(self.server, HttpServer):
            return streamable_http_client(self.server.url)
        self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
        params = StdioServerParameters(
            command=self.server.argv[0],
            args=list(self.server.argv[1:]),
            env=dict(self.server.env) or None,
            cwd=self.cwd,
        )
        return stdio_client(params, errlog=self._stderr)

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.flush()
            self._stderr.seek(0)
            text = self._stderr.read()
        except (OSError, ValueError):
            return ""
        tail = text[-_STDERR_TAIL:].strip()
        return f"; its stderr ends: {tail}" if tail else ""

    async def _hold(self, ready: asyncio.Future[None]) -> None:
        """Keep the client open until :meth:`_close` sets the stop event."""
        assert self._stop is not None
        try:
            async with Client(self._transport(), cache=None) as client:
                self._client = client
                ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                if isinstance(exc, asyncio.CancelledError):
                    ready.cancel()
                else:
                    ready.set_exception(exc)
            elif not self._stop.is_set():
                self._lost = _describe(exc)
            if not isinstance(exc, Exception):
                raise

    async def _open(self, startup_timeout_s: float) -> list[mcp_types.Tool]:
        self._stop = asyncio.Event()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._holder = asyncio.create_task(self._hold(ready))
        where = self.server.describe()
        try:
            return await asyncio.wait_for(self._ready_tools(ready), startup_timeout_s)
        except asyncio.TimeoutError:
            self._holder.cancel()  # still in the handshake: nothing would end it otherwise
            await self._close()
            raise SandboxError(
                f"MCP server {where} did not start within {startup_timeout_s:g}s"
                f"{self._stderr_tail()}"
            ) from None
        except (Exception, asyncio.CancelledError) as exc:
            await self._close()
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise SandboxError(
                f"MCP server {where} failed to start: {_describe(exc)}{self._stderr_tail()}"
            ) from exc

    async def _ready_tools(self, ready: asyncio.Future[None]) -> list[mcp_types.Tool]:
        await asyncio.shield(ready)
        return await self._list_tools()

    async def _list_tools(self) -> list[mcp_types.Tool]:
        assert self._client is not None
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        for _ in range(_MAX_TOOL_PAGES):
            page = await self._client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                return tools
        raise SandboxError(f"tools/list did not end after {_MAX_TOOL_PAGES} pages")

    async def _call(self, name: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        if not self.alive or self._client is None:
            raise SandboxError(self._lost_message(self._lost or "not open"))
        try:
            return await self._client.call_tool(name, arguments)
        except MCPError as exc:
            if _connection_lost(exc):
                self._lost = _describe(exc)
                raise SandboxError(self._lost_message(self._lost)) from exc
            raise ServerToolError(f"the server refused the call: {exc.message}") from None
        except ValidationError as exc:  # a reply the protocol does not allow
            raise ServerToolError(f"the server's reply was malformed: {exc.error_count()} "
                                  "validation errors") from None
        except Exception as exc:
            if _connection_lost(exc):
                self._lost = _describe(exc)
                raise SandboxError(self._lost_message(self._lost)) from exc
            raise

    def _lost_message(self, why: str) -> str:
        return f"MCP server {self.server.describe()} is gone ({why}){self._stderr_tail()}"

    async def _close(self) -> None:
        if self._stop is not None:
            self._stop.set()
        holder, self._holder = self._holder, None
        if holder is not None:
            # the holder keeps its own errors (see _hold); wait, never raise, from here
            done, _ = await asyncio.wait([holder], timeout=_CLOSE_WAIT_S)
            if not done:
                _log.warning("MCP server %s did not close in %gs; cancelling its client",
                             self.server.describe(), _CLOSE_WAIT_S)
                holder.cancel()
                await asyncio.wait([holder], timeout=_CLOSE_WAIT_S)
        self._client = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
