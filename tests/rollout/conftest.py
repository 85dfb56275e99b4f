"""Fixtures: scripted model servers (real uvicorn on 127.0.0.1) and the calc environment."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

import envhub
from envhub.clients.local import LocalEnvironment
from tests.rollout.scripted_server import ScriptConfig, ScriptedServer


@pytest.fixture
def scripted() -> Iterator[Callable[..., ScriptedServer]]:
    """``scripted(ScriptConfig(...))`` starts a server that is stopped after the test."""
    servers: list[ScriptedServer] = []

    def start(config: ScriptConfig | None = None, port: int = 0) -> ScriptedServer:
        server = ScriptedServer(config or ScriptConfig(), port=port).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def calc() -> LocalEnvironment:
    env = envhub.make("calc", num_tasks=200)
    env.tasks  # noqa: B018 - load once per test session
    return env
