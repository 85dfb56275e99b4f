"""One default transport, and a connection pool as large as the concurrency (issue 13)."""

from __future__ import annotations

import asyncio
import inspect

import pytest

import envhub
from envhub.cli.rollout import rollout_command
from envhub.clients.remote import RemoteEnvironment
from tests.rollout.scripted_server import ThreadedUvicorn

server_app = pytest.importorskip("envhub.server", reason="the server extra is not installed")


def cli_default(name: str) -> object:
    return inspect.signature(rollout_command).parameters[name].default


async def test_the_client_and_the_cli_default_to_the_same_transport() -> None:
    # the CLI names none (None), so the client's own default decides: ws where aiohttp is
    # installed (here), http on a core install without it
    assert cli_default("env_transport") is None
    remote = RemoteEnvironment("http://127.0.0.1:9", "calc", transport=None)
    try:
        assert remote.transport == "ws"
    finally:
        await remote.aclose()
    from envhub.clients.remote import DEFAULT_TRANSPORT

    assert DEFAULT_TRANSPORT == "ws"
    # the httpx engine has no WebSocket client: HTTP is its default, ws a clear error
    over_httpx = RemoteEnvironment("http://127.0.0.1:9", "calc", http="httpx")
    assert over_httpx.transport == "http"
    await over_httpx.aclose()


def test_the_cli_spells_out_the_library_defaults() -> None:
    from envhub.cli.rollout import DEFAULT_MAX_CONSECUTIVE_MASKED, DEFAULT_MAX_MASKED_FRACTION
    from envhub.rollout.breaker import DEFAULT_BREAKER_THRESHOLD
    from envhub.rollout.run import DEFAULT_MAX_MASKED_FRACTION as LIBRARY_FRACTION

    assert DEFAULT_MAX_MASKED_FRACTION == LIBRARY_FRACTION == cli_default("max_masked_fraction")
    assert DEFAULT_MAX_CONSECUTIVE_MASKED == DEFAULT_BREAKER_THRESHOLD
    assert cli_default("max_consecutive_masked") == DEFAULT_BREAKER_THRESHOLD


@pytest.mark.parametrize("http", ["aiohttp", "httpx"])
async def test_the_default_pool_serves_more_sessions_at_once_than_the_old_cap(http: str) -> None:
    """300 sessions step at the same moment over HTTP: the server's tool answers only when
    all 300 calls are inside it, so a pool capped below 300 (the old default, 256) leaves
    calls queued in the client and every call times out instead."""
    party = 300
    hosted = envhub.make("tests.rollout.faulty_envs:Rendezvous", party=party, room=http)
    app = server_app.create_app({"rendezvous": hosted})
    call = {"id": "1", "name": "calculate", "arguments": '{"expression": "6 * 7"}'}
    with ThreadedUvicorn(app, lifespan="on") as server:
        async with RemoteEnvironment(server.url, "rendezvous", transport="http",
                                     http=http) as remote:  # fmt: skip
            sessions = await asyncio.gather(*(remote.open() for _ in range(party)))
            steps = await asyncio.gather(*(s.step([call]) for s in sessions))
            await asyncio.gather(*(s.abort() for s in sessions))
    observations = [step.observations[0] for step in steps]
    assert not any(o.is_error for o in observations), observations[0]
    assert {o.content for o in observations} == {"42"}
