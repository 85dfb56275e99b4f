"""DNS rebinding and cross-site requests: every door of a real server (REST, the session
fast path, WebSocket handshakes, MCP over HTTP) refuses a ``Host`` or a browser ``Origin``
it does not serve, and serves the loopback names and the names the operator listed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import httpx
import pytest
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS

from envhub.testing import serve_in_subprocess
from tests.mcp.clients import ACCEPT, INITIALIZE

EVIL = "evil.example"


async def _answers(url: str, headers: dict[str, str]) -> list[tuple[str, int, Any]]:
    """``(request, status, body)`` of a request at each HTTP door with ``headers``."""
    async with httpx.AsyncClient(base_url=url, headers=ACCEPT) as http:
        created = await http.post("/v1/sessions", json={"env": "calc"})
        session_id = created.json()["session_id"]
        initialized = await http.post("/mcp/calc", json=INITIALIZE)
        mcp_session = {
            "Mcp-Session-Id": initialized.headers["mcp-session-id"],
            "Mcp-Protocol-Version": HANDSHAKE_PROTOCOL_VERSIONS[-1],
        }
        await http.post(
            "/mcp/calc",
            headers=mcp_session,
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
        )
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "calculate", "arguments": {"expression": "1 + 1"}},
        }
        step = {
            "tool_calls": [{"id": "c", "name": "calculate", "arguments": {"expression": "1 + 1"}}]
        }
        requests = [
            ("GET /health", http.get("/health", headers=headers)),
            ("GET /v1/environments", http.get("/v1/environments", headers=headers)),
            ("POST /v1/sessions", http.post("/v1/sessions", json={"env": "calc"}, headers=headers)),
            (
                "POST step (fast path)",
                http.post(f"/v1/sessions/{session_id}/step", json=step, headers=headers),
            ),
            ("MCP initialize", http.post("/mcp/calc", json=INITIALIZE, headers=headers)),
            (
                "MCP tools/call",
                http.post("/mcp/calc", json=call, headers={**mcp_session, **headers}),
            ),
        ]
        answers = []
        for name, request in requests:
            response = await request
            answers.append((name, response.status_code, response.json()))
        await http.delete("/mcp/calc", headers=mcp_session)
        await http.post(f"/v1/sessions/{session_id}/close")
        return answers


async def _ws_status(url: str, headers: dict[str, str]) -> int:
    """The status a WebSocket handshake with ``headers`` gets (101: connected)."""
    async with aiohttp.ClientSession() as http:
        try:
            async with http.ws_connect(f"{url}/v1/ws", headers=headers) as ws:
                await ws.close()
                return 101
        except aiohttp.WSServerHandshakeError as refused:
            return refused.status


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({"Host": EVIL}, 400, "untrusted_host"),
        ({"Host": f"{EVIL}:8000"}, 400, "untrusted_host"),
        ({"Host": "127.0.0.1.evil.example"}, 400, "untrusted_host"),
        ({"Origin": f"http://{EVIL}"}, 403, "untrusted_origin"),
        ({"Origin": f"http://{EVIL}:8000"}, 403, "untrusted_origin"),
        ({"Origin": "null"}, 403, "untrusted_origin"),
        ({"Origin": "http://[::1"}, 403, "untrusted_origin"),
    ],
)
async def test_a_foreign_host_or_origin_is_refused_at_every_door(
    start_server: Callable[..., str], headers: dict[str, str], status: int, code: str
) -> None:
    url = start_server(mcp=True)
    for name, got, body in await _answers(url, headers):
        assert (got, body["error"]["code"]) == (status, code), name
    assert await _ws_status(url, headers) == status


async def test_loopback_names_and_listed_hosts_are_served(start_server: Callable[..., str]) -> None:
    url = start_server(mcp=True, allowed_hosts=["envhub.internal"])
    port = urlsplit(url).port
    hosts = [
        "127.0.0.1",
        f"127.0.0.1:{port}",
        "localhost",
        f"LOCALHOST:{port}",
        "[::1]",
        f"[::1]:{port}",
        "envhub.internal",
        "envhub.internal:443",
    ]
    origins = [
        "http://localhost:6274",
        f"http://127.0.0.1:{port}",
        "http://[::1]:3000",
        "https://envhub.internal",
    ]
    for headers in [{"Host": h} for h in hosts] + [{"Origin": o} for o in origins]:
        for name, got, body in await _answers(url, headers):
            assert got == 200, (headers, name, body)
        assert await _ws_status(url, headers) == 101, headers
    for name, got, _ in await _answers(url, {"Host": EVIL}):
        assert got == 400, name


async def test_an_exposed_server_takes_any_host_but_no_foreign_origin(
    start_server: Callable[..., str],
) -> None:
    """Listening on every address: the operator chose to expose the server under names it
    cannot know (a container's, a balancer's); a browser page of another site is still
    refused, and its own origin is served."""
    url = start_server(mcp=True, host="0.0.0.0")
    for name, got, _ in await _answers(url, {"Host": "replica-7.cluster"}):
        assert got == 200, name
    same_site = {"Host": "replica-7.cluster:80", "Origin": "http://replica-7.cluster:80"}
    for name, got, _ in await _answers(url, same_site):
        assert got == 200, name
    for name, got, body in await _answers(url, {"Origin": f"http://{EVIL}"}):
        assert (got, body["error"]["code"]) == (403, "untrusted_origin"), name


async def test_a_server_bound_to_one_address_serves_that_address(
    start_server: Callable[..., str],
) -> None:
    url = start_server(host="10.1.2.3")
    async with httpx.AsyncClient(base_url=url) as http:
        assert (await http.get("/health", headers={"Host": "10.1.2.3:8000"})).status_code == 200
        assert (await http.get("/health", headers={"Host": "10.1.2.4"})).status_code == 400


def test_envhub_serve_takes_allowed_hosts_from_its_command_line() -> None:
    with serve_in_subprocess(
        "calc", "--allowed-host", "envhub.internal", "--allowed-host", "gpu-7"
    ) as url:
        for host, status in (
            ("envhub.internal", 200),
            ("gpu-7:8000", 200),
            ("localhost", 200),
            (EVIL, 400),
        ):
            response = httpx.get(f"{url}/v1/environments", headers={"Host": host})
            assert response.status_code == status, host
        refused = httpx.get(f"{url}/v1/environments", headers={"Origin": f"http://{EVIL}"})
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "untrusted_origin"
