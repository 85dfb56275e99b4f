"""Real servers for the MCP tests: ``create_app(..., mcp=True)`` under uvicorn on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import envhub
from envhub.server import create_app
from envhub.testing import serve_in_thread

TOKEN = "mcp-test-token"
MAX_BODY = 8192
MAX_TURNS = 3


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    """calc and sql with their default limits and budgets."""
    with serve_in_thread(create_app(["calc", "sql"], mcp=True)) as base_url:
        yield base_url


@pytest.fixture(scope="module")
def strict_url() -> Iterator[str]:
    """calc behind a bearer token, a small body limit and a 3-turn budget."""
    app = create_app({"calc": envhub.make("calc", max_turns=MAX_TURNS)}, token=TOKEN,
                     max_body_bytes=MAX_BODY, mcp=True)
    with serve_in_thread(app) as base_url:
        yield base_url
