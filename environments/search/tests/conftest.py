"""Shared fixtures: one temporary corpus cache per test run, and a one-call helper."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterator

import pytest

from envhub.session import Session
from envhub.types import Observation, ToolCall


@pytest.fixture(scope="session", autouse=True)
def search_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Point ``ENVHUB_CACHE`` at a fresh directory so tests never reuse a stale build."""
    path = str(tmp_path_factory.mktemp("envhub-cache"))
    previous = os.environ.get("ENVHUB_CACHE")
    os.environ["ENVHUB_CACHE"] = path
    yield path
    if previous is None:
        os.environ.pop("ENVHUB_CACHE", None)
    else:
        os.environ["ENVHUB_CACHE"] = previous


async def _call(session: Session, name: str, **arguments: object) -> Observation:
    result = await session.step([ToolCall(id=f"call-{name}", name=name, arguments=arguments)])
    return result.observations[0]


@pytest.fixture
def call() -> Callable[..., Awaitable[Observation]]:
    """``await call(session, "search", query=...)``: one tool call in its own turn."""
    return _call
