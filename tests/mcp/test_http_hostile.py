"""Hostile requests at the MCP door of a real server: answers with a typed error, never a
500, and a model's hostile tool-call arguments are the model's error, not the episode's
end: the episode goes on and is scored."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from mcp.types import PARSE_ERROR
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS

import envhub
from envhub.testing import serve_in_thread
from envhub.testing.hostile import deeply_nested_json
from tests.mcp.clients import ACCEPT, INITIALIZE, TASKS

HEADERS = {**ACCEPT, "Content-Type": "application/json"}
MAX_BODY = 4 * 1024 * 1024
_RAW = "\x00raw"  # stands for the raw JSON text _with_raw splices in


@pytest.fixture(scope="module")
def url(mcp_app: Callable[..., Any]) -> Iterator[str]:
    """calc with the default 4 MiB body limit, named so the tests can outgrow it."""
    with serve_in_thread(mcp_app(["calc"], max_body_bytes=MAX_BODY)) as base_url:
        yield base_url


def _chunked(size: int) -> Iterator[bytes]:
    """A JSON body (spaces, then ``{}``) just over ``size`` bytes, sent without
    Content-Length (chunked), so only counting the streamed chunks can refuse it."""
    chunk = b" " * 65536
    for _ in range(size // len(chunk)):
        yield chunk
    yield b"{}"


def _session(http: httpx.Client, task_id: str | None = None) -> dict[str, str]:
    """An initialized MCP session's request headers."""
    answer = http.post(f"/mcp/calc{f'?task_id={task_id}' if task_id else ''}", json=INITIALIZE)
    assert answer.status_code == 200, answer.text
    headers = {
        "Mcp-Session-Id": answer.headers["mcp-session-id"],
        "Mcp-Protocol-Version": HANDSHAKE_PROTOCOL_VERSIONS[-1],
        "envhub-session-id": answer.headers["envhub-session-id"],
    }
    http.post(
        "/mcp/calc", headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
    )
    return headers


def _with_raw(message: dict[str, Any], field: str, raw: str) -> bytes:
    """``message`` as a body whose ``params[field]`` is ``raw``, JSON text that ``json``
    cannot write (too deep for it, or invalid: a lone surrogate, a number past any limit)."""
    text = json.dumps({**message, "params": {**message["params"], field: _RAW}})
    return text.replace(json.dumps(_RAW), raw).encode("utf-8", "surrogatepass")


def _call(http: httpx.Client, headers: dict[str, str], name: str, arguments: str) -> Any:
    """A tools/call whose arguments are ``arguments``, raw JSON text (maybe invalid)."""
    call = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": name}}
    body = _with_raw(call, "arguments", arguments)
    return http.post("/mcp/calc", headers=headers, content=body)


def test_initialize_with_deeply_nested_meta_is_a_parse_error(url: str) -> None:
    body = _with_raw(INITIALIZE, "_meta", deeply_nested_json(50_000))
    with httpx.Client(base_url=url, headers=HEADERS) as http:
        answer = http.post("/mcp/calc", content=body)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["code"] == PARSE_ERROR
        assert http.get("/health").json()["sessions"] == 0
        _session(http)  # still serving


def test_a_chunked_body_over_the_limit_is_413(url: str) -> None:
    with httpx.Client(base_url=url, headers=HEADERS, timeout=60) as http:
        before = http.post("/mcp/calc", content=_chunked(MAX_BODY + 1))
        headers = _session(http)
        during = http.post("/mcp/calc", headers=headers, content=_chunked(MAX_BODY + 1))
        for answer in (before, during):
            assert answer.status_code == 413, answer.text
            assert answer.json()["error"]["code"] == "payload_too_large"
        listed = http.post(
            "/mcp/calc", headers=headers, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        )
        assert listed.status_code == 200  # the session goes on


#: arguments a JSON parser reads, hostile to what reads them next
READABLE = [
    deeply_nested_json(150),
    '{"expression": 1e999999}',
    '{"expression": %s}' % ("9" * 4000),
    '{"expression": {"a": [1, {"b": null}]}}',
    '{"expression": "\\u0000\\u202e"}',
]
#: arguments no JSON parser of the door reads: invalid JSON-RPC, refused as such
UNREADABLE = [
    deeply_nested_json(),
    deeply_nested_json(50_000),
    '{"expression": "\\ud800"}',
    '{"expression": "\\udcff\\udcfe"}',
    '{"expression": %s}' % ("9" * 5000),
]


def test_hostile_tool_arguments_are_the_models_errors_and_the_episode_is_scored(
    url: str,
) -> None:
    task = envhub.make("calc").tasks.get(TASKS["calc"])
    with httpx.Client(base_url=url, headers=HEADERS, timeout=60) as http:
        headers = _session(http, task.id)
        for arguments in READABLE:
            answer = _call(http, headers, "calculate", arguments)
            assert answer.status_code == 200, (arguments[:40], answer.text)
            result = answer.json()["result"]
            assert result["isError"] and not result["_meta"]["envhub/done"], arguments[:40]
        for arguments in UNREADABLE:
            answer = _call(http, headers, "calculate", arguments)
            assert answer.status_code == 400, (arguments[:40], answer.text)
            assert answer.json()["error"]["code"] == PARSE_ERROR
        session_id = headers["envhub-session-id"]
        state = http.get(f"/v1/sessions/{session_id}").json()
        assert state["metrics"]["turns"] == len(READABLE) and not state["done"]
        *work, answer = task.gold_actions
        for gold in work:
            text = json.dumps(gold.arguments)
            assert not _call(http, headers, gold.name, text).json()["result"]["isError"]
        answered = _call(http, headers, answer.name, json.dumps(answer.arguments))
        assert answered.json()["result"]["_meta"]["envhub/reward"] == 1.0
        assert http.delete("/mcp/calc", headers=headers).status_code == 200
        closed = http.post(f"/v1/sessions/{session_id}/close").json()
        assert (closed["reward"], closed["stop_reason"]) == (1.0, "terminal_tool")
