"""An MCP session lives no longer than its envhub session: the store's capacity and idle
TTL hold at the MCP door too, whatever the client keeps open (a GET stream, as the MCP
Inspector does) or never sends (a DELETE)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS

from envhub.testing import serve_in_thread
from tests.mcp.clients import ACCEPT, INITIALIZE

TTL_S = 0.5


@pytest.fixture
def one_slot(mcp_app: Callable[..., Any]) -> Iterator[str]:
    """A server holding one session, reaped after half a second idle."""
    app = mcp_app(["calc"], max_sessions=1, session_ttl_s=TTL_S)
    with serve_in_thread(app) as url:
        yield url


@asynccontextmanager
async def mcp_client(url: str) -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, str], str]]:
    """An initialized MCP session that never sends DELETE: the client, the headers of its
    requests and its envhub session id."""
    async with httpx.AsyncClient(base_url=url, headers=ACCEPT, timeout=30) as http:
        answer = await http.post("/mcp/calc", json=INITIALIZE)
        assert answer.status_code == 200, answer.text
        headers = {
            "Mcp-Session-Id": answer.headers["mcp-session-id"],
            "Mcp-Protocol-Version": HANDSHAKE_PROTOCOL_VERSIONS[-1],
        }
        notified = await http.post(
            "/mcp/calc",
            headers=headers,
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
        )
        assert notified.status_code == 202
        yield http, headers, answer.headers["envhub-session-id"]


async def _eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 30.0) -> None:
    """Wait until ``check()`` holds (the reaper runs a few times per TTL)."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def _tools_list(http: httpx.AsyncClient, headers: dict[str, str]) -> httpx.Response:
    """A ``tools/list`` of the MCP session with ``headers``."""
    tools_list = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    return await http.post("/mcp/calc", headers=headers, json=tools_list)


async def _initialize_status(url: str) -> int:
    async with httpx.AsyncClient(base_url=url, headers=ACCEPT) as http:
        answer = await http.post("/mcp/calc", json=INITIALIZE)
        if answer.status_code == 200:
            await http.delete(
                "/mcp/calc", headers={"Mcp-Session-Id": answer.headers["mcp-session-id"]}
            )
        return answer.status_code


async def test_an_open_get_stream_does_not_hold_a_reaped_sessions_slot(one_slot: str) -> None:
    async with mcp_client(one_slot) as (http, headers, _):
        get = {**headers, "Accept": "text/event-stream"}
        async with http.stream("GET", "/mcp/calc", headers=get) as stream:
            assert stream.status_code == 200

            async def reaped() -> bool:  # by the store, idle past its TTL
                return int((await http.get("/health")).json()["sessions"]) == 0

            await _eventually(reaped)
            assert await _initialize_status(one_slot) == 200  # the slot is free
            # the reaped session's MCP session is gone with it, its stream ended
            await asyncio.wait_for(stream.aread(), timeout=10)
        assert (await _tools_list(http, headers)).status_code == 404


async def test_an_mcp_session_closed_through_another_door_frees_its_slot(
    mcp_app: Callable[..., Any],
) -> None:
    """Closed through the REST API: the slot is free at once; the MCP session answers as
    after the episode (a tool error the model reads) while the server keeps the closed
    result, and is gone once that expired, idle past the TTL, without a DELETE."""
    app = mcp_app(["calc"], max_sessions=1, session_ttl_s=3.0)
    with serve_in_thread(app) as url:
        async with mcp_client(url) as (http, headers, session_id):
            assert await _initialize_status(url) == 429  # the one slot is held
            closed = await http.post(f"/v1/sessions/{session_id}/close")
            assert closed.status_code == 200
            arguments = {"name": "calculate", "arguments": {"expression": "1 + 1"}}
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": arguments}
            late = (await http.post("/mcp/calc", headers=headers, json=call)).json()
            assert late["result"]["isError"] and "episode has ended" in str(late["result"])
            assert await _initialize_status(url) == 200

            async def gone() -> bool:
                return (await _tools_list(http, headers)).status_code == 404

            await _eventually(gone)
            after = (await _tools_list(http, headers)).json()
            assert after["error"]["data"] == {"code": "session_not_found"}
