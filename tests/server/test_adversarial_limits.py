"""Size and memory limits hold against hostile clients and hostile tool calls.

Each case broke before: a chunked oversized close surfaced as a 500, error observations
quoted megabytes of model input, a WebSocket text frame was measured in characters, the
caches of client-chosen option sets had no memory bound, and one slow task-set build
held up every other session's creation.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

import aiohttp
import httpx
import pytest

import envhub
import envhub.clients.local
import envhub.server.store
from envhub.clients.local import LocalEnvironment
from envhub.server.store import HostedEnvironment
from tests.server import adversarial_envs
from tests.server.adversarial_envs import QUOTING, SLOW


async def _create(http: httpx.AsyncClient, env: str, **body: object) -> str:
    response = await http.post("/v1/sessions", json={"env": env, **body})
    assert response.status_code == 200, response.text
    return str(response.json()["session_id"])


async def test_an_oversized_chunked_close_is_413(start_server: Callable[..., str]) -> None:
    url = start_server(envs=[QUOTING], max_body_bytes=1_000)

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: sent chunked
        for _ in range(8):
            yield b" " * 500

    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        sid = await _create(http, "quoting")
        response = await http.post(f"/v1/sessions/{sid}/close", content=chunks())
        assert response.status_code == 413, response.text
        assert response.json() == {"error": {
            "code": "payload_too_large", "message": "request body larger than 1000 bytes"}}
        assert (await http.post(f"/v1/sessions/{sid}/close")).status_code == 200


@pytest.mark.parametrize(
    "call",
    [
        {"id": "c", "name": "x" * 1_000_000, "arguments": "{}"},  # unknown tool
        {"id": "c", "name": "lookup", "arguments": {"key": "k" * 1_000_000}},  # bad id
    ],
)
async def test_error_observations_keep_to_the_output_budget(
    start_server: Callable[..., str], call: dict
) -> None:
    url = start_server(envs=[QUOTING])
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        limit = (await http.get("/v1/environments/quoting")).json()["budgets"]["max_output_chars"]
        sid = await _create(http, "quoting")
        reply = await http.post(f"/v1/sessions/{sid}/step", json={"tool_calls": [call]})
        assert reply.status_code == 200, reply.text[:500]
        observation = reply.json()["observations"][0]
        assert observation["is_error"] and observation["content"].startswith("Error: ")
        assert len(observation["content"]) <= limit + len("\n[truncated 1000000 chars]\n")
        assert len(observation["name"]) <= 256  # the echoed tool name is cut too
        assert "[truncated" in observation["content"]
        metrics = (await http.get(f"/v1/sessions/{sid}")).json()["metrics"]
        assert metrics["truncated_outputs"] == 1


async def test_a_websocket_text_frame_is_measured_in_bytes(
    start_server: Callable[..., str],
) -> None:
    url = start_server(envs=[QUOTING], max_body_bytes=1_000)
    async with httpx.AsyncClient(base_url=url) as http:
        sid = await _create(http, "quoting")

    def step(text: str) -> str:
        call = {"id": "c", "name": "echo", "arguments": {"text": text}}
        return json.dumps({"op": "step", "tool_calls": [call]}, ensure_ascii=False)

    async with (aiohttp.ClientSession() as client,
                client.ws_connect(f"{url}/v1/sessions/{sid}/ws") as ws):
        wide = step("é" * 600)  # 600 characters but 1,200 bytes of UTF-8
        assert len(wide) < 1_000 < len(wide.encode())
        await ws.send_str(wide)
        reply = json.loads(await ws.receive_str(timeout=10))
        assert reply["status"] == 413 and reply["error"]["code"] == "payload_too_large"
        await ws.send_str(step("e" * 600))  # the same length in ASCII fits
        reply = json.loads(await ws.receive_str(timeout=10))
        assert reply["observations"][0]["content"] == "e" * 600


async def test_a_slow_variant_build_does_not_hold_up_other_sessions(
    start_server: Callable[..., str],
) -> None:
    adversarial_envs.BUILDING.clear()
    adversarial_envs.RELEASE.clear()
    url = start_server(envs=[SLOW])
    async with httpx.AsyncClient(base_url=url, timeout=15) as http:
        slow = asyncio.create_task(_create(http, "slow", options={"slow": True}))
        try:
            assert await asyncio.to_thread(adversarial_envs.BUILDING.wait, 15)
            other = await _create(http, "slow")  # the hosted option set, meanwhile
            step = {"tool_calls": [{"id": "c", "name": "echo", "arguments": {"text": "hi"}}]}
            reply = await http.post(f"/v1/sessions/{other}/step", json=step)
            assert reply.json()["observations"][0]["content"] == "hi"
            assert not slow.done()  # all of that happened while the build was still running
        finally:
            adversarial_envs.RELEASE.set()
        await slow


async def test_client_variants_are_bounded_by_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    hosted = HostedEnvironment("calc", envhub.make("calc"))
    one_set = (await hosted.variant({"num_tasks": 2_000, "seed": 1})).tasks_bytes
    monkeypatch.setattr(envhub.server.store, "_MAX_VARIANT_BYTES", int(one_set * 2.5))
    hosted = HostedEnvironment("calc", envhub.make("calc"))
    first = await hosted.variant({"num_tasks": 2_000, "seed": 1})
    await hosted.variant({"num_tasks": 2_000, "seed": 2})
    assert await hosted.variant({"num_tasks": 2_000, "seed": 1}) is first  # two fit
    for seed in (3, 4):
        await hosted.variant({"num_tasks": 2_000, "seed": seed})
    assert await hosted.variant({"num_tasks": 2_000, "seed": 1}) is not first  # evicted


def test_the_shared_task_set_cache_is_bounded_by_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def tasks(seed: int) -> object:
        return LocalEnvironment("calc", {"num_tasks": 2_000, "seed": 100 + seed}).tasks

    one_set = LocalEnvironment("calc", {"num_tasks": 2_000, "seed": 100}).tasks_bytes
    assert one_set > 2_000 * 500  # a task holds its prompt, answer and gold calls
    monkeypatch.setattr(envhub.clients.local._TASKSETS, "max_bytes", int(one_set * 2.5))
    first = tasks(1)
    assert tasks(1) is first  # shared while it fits
    tasks(2)
    tasks(3)
    assert tasks(1) is not first
