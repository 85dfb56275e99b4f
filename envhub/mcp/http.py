"""Streamable HTTP serving of envhub sessions as MCP servers."""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager
from typing import Any

import uvicorn

__all__ = ["quiet_uvicorn_server"]


class _QuietServer(uvicorn.Server):
    """A uvicorn server that leaves the process's signal handlers alone: many of them run
    in one event loop (one per episode), and the process's owner handles Ctrl-C."""

    @contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def quiet_uvicorn_server(app: Any) -> uvicorn.Server:
    """A uvicorn server for ``app`` to run with ``serve(sockets=...)`` in the current loop."""
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
    return _QuietServer(config)
