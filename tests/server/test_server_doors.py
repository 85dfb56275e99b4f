"""One rule, three doors: a step reaches the server through the FastAPI route (a streamed
body the fast path leaves alone), the session fast path (a declared-length JSON body) or a
WebSocket; the bearer token, the size limit and validation answers are the same on each.
Real uvicorn servers on 127.0.0.1; the fast path is watched so each case proves which
door answered it."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import httpx
import pytest

import envhub.server.fastpath
from envhub.server.fastpath import _session_call

DOORS = ("route", "fastpath", "websocket")
ECHO = {"id": "e", "name": "echo", "arguments": {"text": "hi"}}


@dataclass
class Reply:
    status: int
    body: dict[str, Any]

    @property
    def error(self) -> tuple[int, str, str]:
        return self.status, self.body["error"]["code"], self.body["error"]["message"]


@pytest.fixture
def fast_path_hits(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Paths the fast path took (the servers run in this process)."""
    hits: list[str] = []

    def watched(scope: Any) -> tuple[str, str] | None:
        target = _session_call(scope)
        if target is not None:
            hits.append(scope["path"])
        return target

    monkeypatch.setattr(envhub.server.fastpath, "_session_call", watched)
    yield hits


async def step(door: str, url: str, session_id: str, body: bytes | dict[str, Any],
               token: str | None = None) -> Reply:
    """One step through ``door``; a refused WebSocket handshake is its HTTP status and an
    empty body."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"authorization": f"Bearer {token}"} if token else {}
    if door == "websocket":
        message = body if isinstance(body, bytes) else json.dumps({"op": "step", **body}).encode()
        async with aiohttp.ClientSession(headers=headers) as client:
            try:
                ws = await client.ws_connect(f"{url}/v1/sessions/{session_id}/ws")
            except aiohttp.WSServerHandshakeError as exc:
                return Reply(exc.status, {})
            async with ws:
                await ws.send_str(message.decode())
                reply = json.loads(await ws.receive_str(timeout=10))
                return Reply(reply.get("status", 200), reply)
    headers["content-type"] = "application/json"
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        if door == "fastpath":
            response = await http.post(f"/v1/sessions/{session_id}/step", content=data,
                                       headers=headers)
        else:
            async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: FastAPI's route
                yield data

            response = await http.post(f"/v1/sessions/{session_id}/step", content=chunked(),
                                       headers=headers)
    return Reply(response.status_code, response.json())


async def create(url: str, token: str | None = None) -> str:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=url, headers=headers) as http:
        response = await http.post("/v1/sessions", json={"env": "probe", "task_id": "probe-1"})
        assert response.status_code == 200, response.text
        return str(response.json()["session_id"])


async def errors_counted(url: str, code: str, token: str | None = None) -> float:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=url, headers=headers) as http:
        text = (await http.get("/metrics")).text
    found = re.search(rf'^envhub_http_errors_total{{code="{code}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def assert_door(door: str, hits: list[str], session_id: str) -> None:
    took_fast_path = f"/v1/sessions/{session_id}/step" in hits
    assert took_fast_path == (door == "fastpath"), (door, hits)


@pytest.mark.parametrize("door", DOORS)
async def test_the_bearer_token_guards_every_door(
    door: str, start_server: Callable[..., str], fast_path_hits: list[str]
) -> None:
    url = start_server(token="s3cret")
    sid = await create(url, "s3cret")
    for given in (None, "wrong"):
        before = await errors_counted(url, "unauthorized", "s3cret")
        refused = await step(door, url, sid, {"tool_calls": [ECHO]}, given)
        if door == "websocket":
            assert refused.status == 403  # the handshake closed with 1008
        else:
            assert refused.error[:2] == (401, "unauthorized")
        assert await errors_counted(url, "unauthorized", "s3cret") == before + 1
    assert fast_path_hits == []  # refused before any door
    allowed = await step(door, url, sid, {"tool_calls": [ECHO]}, "s3cret")
    assert allowed.status == 200 and allowed.body["observations"][0]["content"] == "hi"
    assert_door(door, fast_path_hits, sid)


@pytest.mark.parametrize("door", DOORS)
async def test_the_size_limit_holds_on_every_door(
    door: str, start_server: Callable[..., str]
) -> None:
    url = start_server(max_body_bytes=1_000)
    sid = await create(url)
    wide = {"tool_calls": [{**ECHO, "arguments": {"text": "é" * 600}}]}  # 1,200+ bytes
    before = await errors_counted(url, "payload_too_large")
    status, code, message = (await step(door, url, sid, wide)).error
    assert (status, code) == (413, "payload_too_large")
    assert "larger than 1000 bytes" in message
    assert await errors_counted(url, "payload_too_large") == before + 1
    fits = {"tool_calls": [{**ECHO, "arguments": {"text": "e" * 600}}]}
    assert (await step(door, url, sid, fits)).body["observations"][0]["content"] == "e" * 600


BAD_STEPS = [
    ({"tool_calls": "echo"}, "tool_calls: Input should be a valid list"),
    ({"tool_calls": [], "content": 5}, "content: Input should be a valid string"),
    ({"tool_calls": [], "typo": 1}, "typo: Extra inputs are not permitted"),
    ({"tool_calls": [], "request_id": "r" * 129},
     "request_id: String should have at most 128 characters"),
]


@pytest.mark.parametrize("door", DOORS)
async def test_validation_answers_read_the_same_on_every_door(
    door: str, url: str, fast_path_hits: list[str]
) -> None:
    sid = await create(url)
    for bad, message in BAD_STEPS:
        assert (await step(door, url, sid, bad)).error == (422, "invalid_request", message)
    status, code, message = (await step(door, url, sid, b'{"tool_calls": [')).error
    assert (status, code) == (422, "invalid_request") and message.startswith("malformed JSON (")
    # the session is untouched and keeps working through the same door
    ok = await step(door, url, sid, {"tool_calls": [ECHO]})
    assert ok.body["observations"][0]["content"] == "hi"
    assert_door(door, fast_path_hits, sid)
