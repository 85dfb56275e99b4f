"""Session calls over ``WS /v1/ws`` and ``WS /v1/sessions/{id}/ws``: raw messages against a
real server, and ``RemoteEnvironment(transport="ws")`` with the same results and typed
errors as HTTP, reusing its sockets across episodes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import httpx
import pytest

import envhub
from envhub.clients._remote_calls import WebSocketSessionCalls, WebSocketSessions
from envhub.clients.remote import RemoteEnvironment, RemoteSession
from envhub.errors import InvalidRequest, SessionClosed, SessionNotFound, Unauthorized

ECHO = {"id": "e", "name": "echo", "arguments": {"text": "hi"}}


async def _create(url: str, env: str = "probe", task_id: str = "probe-1") -> str:
    async with httpx.AsyncClient(base_url=url) as http:
        response = await http.post("/v1/sessions", json={"env": env, "task_id": task_id})
        assert response.status_code == 200, response.text
        return str(response.json()["session_id"])


async def _ask(ws: aiohttp.ClientWebSocketResponse, message: str | dict[str, Any]) -> Any:
    await ws.send_str(message if isinstance(message, str) else json.dumps(message))
    return json.loads(await ws.receive_str(timeout=10))


async def test_episode_over_ws_scores_like_http(url: str) -> None:
    task = envhub.make("calc").tasks.get("calc-0-00007")
    async with (RemoteEnvironment(url, "calc", transport="ws") as over_ws,
                RemoteEnvironment(url, "calc") as over_http):
        rewards = []
        for remote in (over_ws, over_http):
            async with remote.open(task.id) as session:
                for gold in task.gold_actions:
                    result = await session.step([{"id": "g", "name": gold.name,
                                                  "arguments": gold.arguments}])
                assert result.done and session.stop_reason == "terminal_tool"
            rewards.append((await session.close()).reward)  # closing again: same result
        assert rewards == [1.0, 1.0]


async def test_bad_messages_get_error_replies_and_the_socket_stays_usable(url: str) -> None:
    session_id = await _create(url)
    async with (aiohttp.ClientSession() as http,
                http.ws_connect(f"{url}/v1/sessions/{session_id}/ws") as ws):
        for bad in ("{not json", '["step"]', {"op": "dance"}, {"op": "close", "x": 1},
                    {"op": "step", "tool_calls": "echo"}, {"op": "step", "typo": 1}):
            reply = await _ask(ws, bad)
            assert reply["error"]["code"] == "invalid_request", bad
            assert reply["status"] == 422  # as HTTP answers a body that fails its schema
        reply = await _ask(ws, {"op": "step", "tool_calls": [ECHO], "request_id": "r1"})
        assert reply["observations"][0]["content"] == "hi"
        assert (await _ask(ws, {"op": "info"}))["metrics"]["turns"] == 1


async def test_a_connection_socket_carries_whole_episodes(url: str) -> None:
    async with aiohttp.ClientSession() as http, http.ws_connect(f"{url}/v1/ws") as ws:
        for episode in ("a", "b"):  # one socket, one episode after another
            start = await _ask(ws, {"op": "create", "env": "probe", "task_id": "probe-1",
                                    "session_id": f"conn-{episode}"})
            assert start["session_id"] == f"conn-{episode}" and start["messages"]
            reply = await _ask(ws, {"op": "step", "session_id": f"conn-{episode}",
                                    "tool_calls": [ECHO]})
            assert reply["observations"][0]["content"] == "hi"
            info = await _ask(ws, {"op": "info", "session_id": f"conn-{episode}"})
            assert info["metrics"]["turns"] == 1
            assert "reward" in await _ask(ws, {"op": "close", "session_id": f"conn-{episode}"})
        for bad in ({"op": "step", "tool_calls": [ECHO]}, {"op": "close", "session_id": 7},
                    {"op": "create", "env": "probe", "session_id": "has/slash"},
                    {"op": "create", "env": "probe", "typo": 1}):
            reply = await _ask(ws, bad)
            assert reply["error"]["code"] == "invalid_request" and reply["status"] == 422, bad
        reply = await _ask(ws, {"op": "create", "env": "nope"})
        assert reply["error"]["code"] == "unknown_environment" and reply["status"] == 404
    async with (aiohttp.ClientSession() as http,
                http.ws_connect(f"{url}/v1/sessions/on-path/ws") as ws):
        start = await _ask(ws, {"op": "create", "env": "probe", "task_id": "probe-1"})
        assert start["session_id"] == "on-path"  # a session socket creates its own session
        for other in ({"op": "step", "session_id": "other", "tool_calls": [ECHO]},
                      {"op": "create", "env": "probe", "session_id": "other"}):
            reply = await _ask(ws, other)
            assert reply["error"]["code"] == "invalid_request", other
        assert "reward" in await _ask(ws, {"op": "close", "session_id": "on-path"})


async def test_the_client_reuses_one_socket_across_episodes(url: str) -> None:
    async with RemoteEnvironment(url, "probe", transport="ws", retries=0) as remote:
        for _ in range(3):
            async with remote.open("probe-1") as session:
                await session.step([ECHO])
                used = session._calls.socket
        idle = remote._sessions.pool._idle
        assert idle == [used] and used is not None and used.usable
        # The server (or a proxy) drops the idle socket: the next episode reconnects at
        # once, without spending a retry (retries=0 would raise).
        assert used._ws is not None
        used._ws._conn.transport.abort()
        async with remote.open("probe-1") as session:
            assert (await session.step([ECHO])).observations[0].content == "hi"
        assert remote._sessions.pool._idle == [used]


async def test_a_cancelled_call_does_not_leave_its_reply_for_the_next(url: str) -> None:
    nap = {"id": "n", "name": "nap", "arguments": {"seconds": 0.3}}
    async with RemoteEnvironment(url, "probe", transport="ws") as remote:
        session = await remote.open("probe-1")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(session.step([nap], request_id="slow"), 0.05)
        after = await session.step([ECHO], request_id="next")
        assert after.observations[0].content == "hi"  # not the nap's late reply
        slow = await session.step([nap], request_id="slow")  # the stored result
        assert slow.observations[0].tool_call_id == "n"
        await session.close()
        again = await remote.open("probe-1")  # reuses the pooled socket
        assert again.messages == session.messages[: len(again.messages)]
        await again.close()


async def test_unknown_and_closed_sessions(url: str) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(f"{url}/v1/sessions/nope/ws") as ws:
            reply = await _ask(ws, {"op": "step", "tool_calls": [ECHO]})
            assert reply["error"]["code"] == "session_not_found" and reply["status"] == 404
        session_id = await _create(url)
        async with http.ws_connect(f"{url}/v1/sessions/{session_id}/ws") as ws:
            closed = await _ask(ws, {"op": "close"})
            assert closed["reward"] == 0.0 and "metrics" in closed
            reply = await _ask(ws, {"op": "step", "tool_calls": [ECHO]})
            assert reply["error"]["code"] == "session_closed" and reply["status"] == 409
            assert await _ask(ws, {"op": "close"}) == closed

    async with RemoteEnvironment(url, "probe", transport="ws") as remote:
        session = await remote.open("probe-1")
        await session.close()
        with pytest.raises(SessionClosed):
            await session.step([ECHO])
        with pytest.raises(SessionNotFound) as missing:
            await _session_on(remote, session, "nope").step([ECHO])
        assert missing.value.status == 404  # type: ignore[attr-defined]


async def test_request_id_replay_returns_the_stored_step(url: str) -> None:
    async with RemoteEnvironment(url, "probe", transport="ws") as remote:
        session = await remote.open("probe-2")
        first = await session.step([ECHO], request_id="same")
        again = await session.step([ECHO], request_id="same")
        assert again == first
        assert (await session.info()).metrics.turns == 1
        with pytest.raises(InvalidRequest):
            await session.step([ECHO], request_id="x" * 200)  # over the 128-char limit
        await session.close()


async def test_token_is_checked_at_the_handshake(start_server: Callable[..., str]) -> None:
    url = start_server(token="s3cret")
    session_id = await _create_with_token(url, "s3cret")
    async with aiohttp.ClientSession() as http:
        for headers in ({}, {"authorization": "Bearer wrong"}):
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(f"{url}/v1/sessions/{session_id}/ws", headers=headers)
            assert refused.value.status == 403
    async with (RemoteEnvironment(url, "probe", token="s3cret", transport="ws") as remote,
                RemoteEnvironment(url, "probe", token="wrong", transport="ws") as intruder):
        session = await remote.open("probe-1")
        with pytest.raises(Unauthorized):
            await _session_on(intruder, session, session.session_id).step([ECHO])
        assert (await session.step([ECHO])).observations[0].content == "hi"
        await session.close()


async def test_a_dropped_socket_is_reopened(url: str) -> None:
    async with RemoteEnvironment(url, "probe", transport="ws") as remote:
        session = await remote.open("probe-1")
        await session.step([ECHO], request_id="a")
        assert session._calls.socket is not None
        await session._calls.socket.aclose()  # as if the connection had dropped
        await session.step([ECHO], request_id="b")
        assert (await session.close()).metrics.turns == 2


async def test_ws_calls_count_in_the_metrics(start_server: Callable[..., str]) -> None:
    url = start_server()
    async with RemoteEnvironment(url, "probe", transport="ws") as remote:
        session = await remote.open("probe-1")
        for _ in range(3):
            await session.step([ECHO])
        await session.close()
        with pytest.raises(SessionClosed):
            await session.step([ECHO])
    async with httpx.AsyncClient(base_url=url) as http:
        metrics = (await http.get("/metrics")).text
    assert 'envhub_steps_total{env="probe"} 3.0' in metrics
    assert 'envhub_tool_calls_total{env="probe"} 3.0' in metrics
    assert 'envhub_sessions_closed_total{env="probe"} 1.0' in metrics
    assert 'envhub_http_errors_total{code="session_closed"} 1.0' in metrics


def test_ws_needs_aiohttp_engine() -> None:
    with pytest.raises(ValueError, match="aiohttp"):
        RemoteEnvironment("http://127.0.0.1:1", "calc", http="httpx", transport="ws")


def _session_on(remote: RemoteEnvironment, like: RemoteSession, session_id: str
                ) -> RemoteSession:
    """A client handle on ``session_id`` through ``remote`` (another token, a wrong id)."""
    sessions = remote._sessions
    assert isinstance(sessions, WebSocketSessions)
    return RemoteSession(like.start.model_copy(update={"session_id": session_id}),
                         WebSocketSessionCalls(sessions, sessions.pool.lease(), session_id),
                         remote.url)


async def _create_with_token(url: str, token: str) -> str:
    async with httpx.AsyncClient(base_url=url,
                                 headers={"authorization": f"Bearer {token}"}) as http:
        response = await http.post("/v1/sessions", json={"env": "probe", "task_id": "probe-1"})
        return str(response.json()["session_id"])
