"""A request the HTTP API refuses is refused alike on every transport: the same
``InvalidRequest`` with the same message in-process, over HTTP and over WebSocket (the
conformance checks hold the error types; this holds the words, which come from one
formatter, :func:`envhub.runtime.validation.validation_message`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import envhub
from envhub.clients.remote import RemoteEnvironment
from envhub.errors import EnvhubError, InvalidRequest, SessionClosed
from envhub.protocol import EnvironmentClient
from envhub.server import create_app
from envhub.testing import serve_in_thread

NAMELESS: list[Any] = [{"id": "call-nameless", "arguments": "{}"}]


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    with serve_in_thread(create_app({"calc": envhub.make("calc")})) as url:
        yield url


async def _refusals(client: EnvironmentClient) -> list[tuple[str, str]]:
    """``(error type, message)`` of each refused request, in a fixed order."""
    answers = []
    task_id = (await client.task_ids())[0]
    for bad_id in ("has space/slash", "s" * 200, ""):
        with pytest.raises(InvalidRequest) as refused:
            await client.open(task_id, session_id=bad_id)
        answers.append((type(refused.value).__name__, refused.value.message))
    session = await client.open(task_id)
    try:
        for calls, request_id in ((NAMELESS, None), ([], "r" * 129)):
            with pytest.raises(InvalidRequest) as refused:
                await session.step(calls, request_id=request_id)
            answers.append((type(refused.value).__name__, refused.value.message))
        assert (await session.info()).metrics.turns == 0
    finally:
        await session.abort()
    with pytest.raises(EnvhubError) as after_abort:
        await session.close()
    answers.append((type(after_abort.value).__name__, ""))
    return answers


async def test_every_transport_refuses_with_the_same_words(server_url: str) -> None:
    local = envhub.make("calc")
    expected = await _refusals(local)
    assert expected == [
        *[("InvalidRequest", "session_id: String should match pattern '^[A-Za-z0-9._~-]{1,128}$'")]
        * 3,
        ("InvalidRequest", "tool_calls.0.name: Field required"),
        ("InvalidRequest", "request_id: String should have at most 128 characters"),
        (SessionClosed.__name__, ""),
    ]
    for transport in ("http", "ws"):
        async with RemoteEnvironment(server_url, "calc", transport=transport) as remote:
            assert await _refusals(remote) == expected, transport
