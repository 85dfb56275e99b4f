"""Where an MCP server is: a command speaking stdio, or a Streamable-HTTP URL.

Both are operator configuration (running a command or reaching a URL from the host is
the operator's decision, never an HTTP client's). Every string may hold the placeholder
``{workdir}``, replaced by the episode's working directory (or, for a shared server, the
server's own), which is also a stdio server's current directory.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["WORKDIR", "HttpServer", "ServerSpec", "StdioServer", "parse_server"]

#: the placeholder of the working directory in commands, arguments, environment and URLs
WORKDIR = "{workdir}"


class StdioServer(BaseModel):
    """A server started as a subprocess, speaking JSON-RPC over its stdin and stdout."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["stdio"] = "stdio"
    argv: Annotated[tuple[str, ...], Field(min_length=1)]
    #: extra environment variables (on top of the SDK's minimal safe set: PATH, HOME, ...)
    env: tuple[tuple[str, str], ...] = ()

    def at(self, workdir: Path) -> StdioServer:
        """This server with ``{workdir}`` replaced by ``workdir``."""
        where = str(workdir)
        return StdioServer(
            argv=tuple(a.replace(WORKDIR, where) for a in self.argv),
            env=tuple((k, v.replace(WORKDIR, where)) for k, v in self.env),
        )

    def describe(self) -> str:
        return shlex.join(self.argv)


class HttpServer(BaseModel):
    """A server already running, reached over Streamable HTTP."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["http"] = "http"
    url: Annotated[str, Field(pattern=r"^https?://")]

    def at(self, workdir: Path) -> HttpServer:
        return HttpServer(url=self.url.replace(WORKDIR, str(workdir)))

    def describe(self) -> str:
        return self.url


ServerSpec = Annotated[StdioServer | HttpServer, Field(discriminator="kind")]


def parse_server(command: str | list[str] | None, url: str | None) -> StdioServer | HttpServer:
    """The server an operator named: ``command`` (a shell-like string or an argv list) or
    ``url``, exactly one of them."""
    if (command is None) == (url is None):
        raise ValueError("give the MCP server as exactly one of command=... or url=...")
    if url is not None:
        return HttpServer(url=url)
    argv = shlex.split(command) if isinstance(command, str) else list(command or [])
    if not argv:
        raise ValueError("command= is empty")
    return StdioServer(argv=tuple(argv))
