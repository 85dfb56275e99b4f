"""The other way round: an envhub environment (calc) served by a real ``envhub serve
--mcp`` and driven by OpenEnv's own clients, run by OpenEnv's code in its own venv
(``openenv_client.py``): ``MCPToolClient`` (OpenEnv's session methods over ``/mcp`` and
its ``/ws`` socket), ``GenericEnvClient`` and FastMCP's ``Client`` (OpenEnv's MCP
dependency, on the standard MCP door), with the rewards envhub computes; and OpenEnv
requests that are unknown or malformed are typed errors that leave the server serving.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import websockets.sync.client as ws
from envhub_calc.problems import generate_tasks
from websockets.exceptions import ConnectionClosedOK

import envhub.mcp.openenv as openenv_door
from envhub.server.app import create_app
from envhub.testing import serve_in_subprocess, serve_in_thread

CLIENT = Path(__file__).resolve().with_name("openenv_client.py")
RIGHT, WRONG = "calc-0-00001", "calc-0-00002"


@pytest.fixture(scope="module")
def calc_url() -> Iterator[str]:
    """``envhub serve calc --mcp`` in its own process, for this module."""
    with serve_in_subprocess("calc", "--mcp") as url:
        yield url


def test_openenv_clients_drive_an_envhub_environment(calc_url: str,
                                                     openenv_interpreter: Path) -> None:
    answer = {t.id: t.answer for t in generate_tasks(3, 0)}[RIGHT]
    proc = subprocess.run(
        [str(openenv_interpreter), str(CLIENT), f"{calc_url}/calc", RIGHT, answer, WRONG],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = json.loads(proc.stdout)

    tool_client = seen["mcp_tool_client"]
    assert tool_client["reset"] == {"task_id": RIGHT, "done": False, "reward": None}
    assert tool_client["tools"] == ["answer", "calculate"]
    assert tool_client["calculate"] == "14"
    assert "not an arithmetic expression" in tool_client["bad_expression"]  # the model's
    assert tool_client["answer"] == {"reward": 1.0, "done": True, "stop_reason": "terminal_tool"}
    ended = "Error: the episode has ended (stop_reason=terminal_tool)"
    assert tool_client["after_end"].startswith(ended)  # a tool result over HTTP /mcp
    assert tool_client["after_end_step"]["error"].startswith(ended)  # OpenEnv's error field
    assert tool_client["state"]["step_count"] == 5 and tool_client["state"]["episode_id"]
    assert "(code: VALIDATION_ERROR)" in tool_client["bad_step"]
    assert "reset takes task_id, seed and episode_id, not difficulty" in tool_client["bad_reset"]
    assert "unknown task 'no-such-task' (code: VALIDATION_ERROR)" in tool_client["unknown_task"]
    assert tool_client["wrong"] == {"reward": 0.0, "done": True}

    assert seen["generic_client"] == {"reward": 1.0, "done": True}
    assert seen["fastmcp"] == {"tools": ["answer", "calculate"], "calculate": "5", "meta": {
        "envhub/done": True, "envhub/reward": 1.0, "envhub/stop_reason": "terminal_tool"}}

    # every episode was a session of the server (two of MCPToolClient, one of each other
    # client), and each was closed (scored)
    metrics = httpx.get(f"{calc_url}/metrics").text
    assert 'envhub_sessions_created_total{env="calc"} 4.0' in metrics
    assert 'envhub_sessions_closed_total{env="calc"} 4.0' in metrics
    assert 'envhub_sessions_open{env="calc"} 0.0' in metrics


def _rpc(url: str, method: str, params: object = None) -> dict[str, object]:
    body = {"jsonrpc": "2.0", "id": 7, "method": method}
    if params is not None:
        body["params"] = params
    answer = httpx.post(f"{url}/calc/mcp", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_malformed_openenv_requests_are_typed_errors(calc_url: str) -> None:
    """JSON-RPC errors over HTTP, error frames over the socket; the server serves on."""
    errors = {
        "unknown method": _rpc(calc_url, "openenv/session/fork", {}),
        "no session": _rpc(calc_url, "openenv/session/close", {}),
        "unknown session": _rpc(calc_url, "tools/list", {"session_id": "nope"}),
        "params not an object": _rpc(calc_url, "openenv/session/create", [1]),
    }
    assert {k: e["error"]["code"] for k, e in errors.items()} == {  # type: ignore[index]
        "unknown method": -32601, "no session": -32602, "unknown session": -32602,
        "params not an object": -32602}
    session = _rpc(calc_url, "openenv/session/create")["result"]["session_id"]  # type: ignore[index]
    call = _rpc(calc_url, "tools/call", {"session_id": session, "name": 3})
    assert call["error"]["code"] == -32602  # type: ignore[index]
    assert _rpc(calc_url, "openenv/session/close", {"session_id": session})["result"] == {
        "session_id": session, "closed": True}

    socket_url = calc_url.replace("http://", "ws://") + "/calc/ws"
    with ws.connect(socket_url) as socket:
        for frame, code in (("{not json", "INVALID_JSON"), ('{"type": "dance"}', "UNKNOWN_TYPE"),
                            ('{"type": "step", "data": 5}', "VALIDATION_ERROR"),
                            ('{"type": "reset", "data": {"seed": "x"}}', "VALIDATION_ERROR")):
            socket.send(frame)
            answer = json.loads(socket.recv())
            assert answer["type"] == "error" and answer["data"]["code"] == code, answer
        socket.send(b"\xff\xfe")  # a binary frame, not UTF-8
        assert json.loads(socket.recv())["data"]["code"] == "INVALID_JSON"
        socket.send('{"type": "state"}')
        assert json.loads(socket.recv())["data"]["step_count"] == 0
    with ws.connect(f"{socket_url}?session_id=nope") as socket:
        answer = json.loads(socket.recv())
        assert answer["data"]["code"] == "SESSION_ERROR"
    # a standard MCP client's first request is still answered by the MCP SDK
    refused = httpx.post(f"{calc_url}/calc/mcp", json={"jsonrpc": "2.0", "id": 1,
                                                       "method": "tools/list"})
    assert refused.status_code == 400 and "must be initialize" in refused.text
    assert httpx.get(f"{calc_url}/health").status_code == 200


def test_sessions_left_open_are_dropped_least_recently_used_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At the limit, a new session replaces the least recently used one without a socket
    once that one has been idle past the server's TTL (scoring its episode), and is
    refused while every kept session is in use: no client ends another's episode by
    opening sessions."""
    monkeypatch.setattr(openenv_door, "MAX_SESSIONS", 2)
    with serve_in_thread(create_app(["calc"], mcp=True, session_ttl_s=1.0)) as url:
        def create() -> str:
            return _rpc(url, "openenv/session/create")["result"]["session_id"]  # type: ignore[index]

        first, second = create(), create()
        busy = _rpc(url, "openenv/session/create")["error"]  # both used within the TTL
        assert busy["data"] == {"code": "capacity", "max_sessions": 2}  # type: ignore[index]
        time.sleep(1.2)  # both idle past the TTL now
        assert "tools" in _rpc(url, "tools/list", {"session_id": first})["result"]  # type: ignore[operator]
        third = create()  # drops second, idle and used less recently than first
        assert _rpc(url, "tools/list", {"session_id": second})["error"]["data"] == {  # type: ignore[index]
            "code": "session_not_found"}
        socket_url = url.replace("http://", "ws://") + "/calc/ws"
        with ws.connect(f"{socket_url}?session_id={first}") as one, \
                ws.connect(f"{socket_url}?session_id={third}") as other:
            for socket in (one, other):
                socket.send('{"type": "state"}')
                assert json.loads(socket.recv())["type"] == "state"
            refused = _rpc(url, "openenv/session/create")["error"]
            assert refused["data"] == {"code": "capacity", "max_sessions": 2}  # type: ignore[index]
            for socket in (one, other):  # OpenEnv's close frame: the server lets go, then closes
                socket.send('{"type": "close"}')
                with pytest.raises(ConnectionClosedOK):
                    socket.recv()
        time.sleep(1.2)
        fourth = create()  # the sockets are gone: first (with its episode) is dropped
        assert _rpc(url, "tools/list", {"session_id": first})["error"]["message"].startswith(  # type: ignore[index]
            "Unknown session_id")
        assert fourth
        metrics = httpx.get(f"{url}/metrics").text  # first's episode: reaped idle, as its session
        assert 'envhub_sessions_reaped_total{env="calc"} 1.0' in metrics
