"""Shared fixtures: one temporary corpus cache per test run, and a one-call helper."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from envhub.runtime.session import Session
from envhub.types import Observation, ToolCall


@pytest.fixture(scope="session")
def search_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One fresh corpus cache for the whole run, so tests never reuse a stale build."""
    return str(tmp_path_factory.mktemp("envhub-cache"))


@pytest.fixture(autouse=True)
def search_cache(search_cache_dir: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point ``ENVHUB_CACHE`` at that cache for each search test only (other plugins'
    tests keep their own caches)."""
    monkeypatch.setenv("ENVHUB_CACHE", search_cache_dir)
    return search_cache_dir


async def _call(session: Session, name: str, **arguments: object) -> Observation:
    result = await session.step([ToolCall(id=f"call-{name}", name=name, arguments=arguments)])
    return result.observations[0]


@pytest.fixture
def call() -> Callable[..., Awaitable[Observation]]:
    """``await call(session, "search", query=...)``: one tool call in its own turn."""
    return _call
