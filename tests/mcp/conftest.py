"""Real servers for the MCP tests: ``create_app(..., mcp=True)`` under uvicorn on 127.0.0.1.

Each HTTP test runs twice, through the door's lean path (``tools/call``, ``tools/list`` and
the handshake answered on the store) and through the official SDK's transport alone
(``ENVHUB_MCP_LEAN=0``): the two must behave alike in every test, beside the byte-for-byte
comparison of test_http_lean.py."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import envhub
from envhub.server import create_app
from envhub.testing import serve_in_thread

TOKEN = "mcp-test-token"
MAX_BODY = 8192
MAX_TURNS = 3


@pytest.fixture(scope="module", params=["lean", "sdk"])
def door(request: pytest.FixtureRequest) -> str:
    """Which path of the MCP door the module's servers answer on."""
    return str(request.param)


def _app(door: str, *args: Any, **kwargs: Any) -> Any:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ENVHUB_MCP_LEAN", "1" if door == "lean" else "0")  # read at creation
        return create_app(*args, **kwargs, mcp=True)


@pytest.fixture(scope="module")
def mcp_app(door: str) -> Callable[..., Any]:
    """``create_app(..., mcp=True)`` answering on the module's path of the door."""
    return functools.partial(_app, door)


@pytest.fixture(scope="module")
def url(door: str) -> Iterator[str]:
    """calc and sql with their default limits and budgets."""
    with serve_in_thread(_app(door, ["calc", "sql"])) as base_url:
        yield base_url


@pytest.fixture(scope="module")
def strict_url(door: str) -> Iterator[str]:
    """calc behind a bearer token, a small body limit and a 3-turn budget."""
    app = _app(door, {"calc": envhub.make("calc", max_turns=MAX_TURNS)}, token=TOKEN,
               max_body_bytes=MAX_BODY)
    with serve_in_thread(app) as base_url:
        yield base_url
