"""Over HTTP a client may choose the shipped task set and nothing else: the server command,
URL, task file, working-directory template and reward module would run code or read
files on the server's machine, so they are the operator's (400 ``invalid_request``)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from envhub.server import create_app
from envhub.testing import serve_in_thread


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serve_in_thread(create_app(["mcp"])) as base_url:
        yield base_url


@pytest.fixture
async def http(url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        yield client


@pytest.mark.parametrize(
    "option",
    [
        {"command": [sys.executable, "-c", "open('{marker}', 'w')"]},
        {"url": "http://127.0.0.1:9/mcp"},
        {"tasks": "/etc/passwd"},
        {"workdir_from": "/etc"},
        {"reward": "os:system"},
        {"shared_server": True},
        {"startup_timeout_s": 1e9},
    ],
)
async def test_operator_options_are_refused(
    http: httpx.AsyncClient, option: dict[str, Any], tmp_path: Path
) -> None:
    marker = tmp_path / "made-by-a-client"
    if "command" in option:
        option = {"command": [a.replace("{marker}", str(marker)) for a in option["command"]]}
    response = await http.post("/v1/sessions", json={"env": "mcp", "options": option})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    name = next(iter(option))
    assert f"option {name!r} of mcp is set by the server's operator" in error["message"]
    assert "clients may set: task_set" in error["message"]
    assert not marker.exists()


async def test_an_unknown_task_set_is_refused(http: httpx.AsyncClient) -> None:
    response = await http.post(
        "/v1/sessions", json={"env": "mcp", "options": {"task_set": "../../etc"}}
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"


async def test_a_client_chooses_a_shipped_task_set(http: httpx.AsyncClient) -> None:
    created = await http.post(
        "/v1/sessions",
        json={"env": "mcp", "task_id": "time-zones-01", "options": {"task_set": "time-zones"}},
    )
    assert created.status_code == 200, created.text
    body = created.json()
    assert {t["function"]["name"] for t in body["tools"]} == {
        "convert_time", "get_current_time", "answer"
    }
    sid = body["session_id"]
    call = {"id": "c1", "name": "convert_time", "arguments": {
        "source_timezone": "Asia/Tokyo", "time": "09:15", "target_timezone": "Asia/Kathmandu"}}
    step = (await http.post(f"/v1/sessions/{sid}/step", json={"tool_calls": [call]})).json()
    assert "T06:00:00+05:45" in step["observations"][0]["content"]
    answer = {"id": "c2", "name": "answer", "arguments": {"value": "06:00"}}
    step = (await http.post(f"/v1/sessions/{sid}/step", json={"tool_calls": [answer]})).json()
    assert step["done"] and step["reward"] == 1.0
    closed = (await http.post(f"/v1/sessions/{sid}/close")).json()
    assert closed["reward"] == 1.0
