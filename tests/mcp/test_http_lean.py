"""The lean path (the handshake, ``tools/call`` and ``tools/list``) answers byte for byte
as the SDK's transport does: the same requests (well formed, malformed, hostile, refused) go to a
server with the lean path and to one without it (``ENVHUB_MCP_LEAN=0``), and the HTTP
statuses, headers and bodies must be equal once the session ids are set aside.

The rest of ``tests/mcp/`` runs on both paths (the ``door`` fixture of conftest.py), where
the answers are checked for meaning rather than bytes (docs/tests.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS

import envhub
from envhub.server import create_app
from envhub.testing import serve_in_thread
from envhub.testing.hostile import deeply_nested_json
from tests.core.user_turn_envs import LATE_TOOL, ScriptedUserEnv
from tests.mcp.clients import ACCEPT, INITIALIZE, TASKS
from tests.rollout.turn_reward_env import MarkEnv

TOKEN = "lean-token"
MAX_BODY = 16384
HEADERS = {**ACCEPT, "Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}


def _call(request_id: Any, name: Any, arguments: Any = None, **params: Any) -> dict[str, Any]:
    fields = {"name": name, **params}
    if arguments is not None:
        fields["arguments"] = arguments
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": fields}


def _list(request_id: Any, **fields: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/list", **fields}


# (body: an object to send as JSON, or raw bytes; headers to set or, as None, to drop)
EXCHANGES: list[tuple[Any, dict[str, str | None]]] = [
    (_list(2), {}),
    (_list("list-3", params={}), {}),
    (_list(4, params={"cursor": "x"}), {}),
    (_call(5, "calculate", {"expression": "2 + 3"}), {}),
    (_call("s-6", "calculate", {"expression": "7 * 6"}), {}),
    (_call(7, "calculate", {"expr": 7}), {}),  # bad arguments: the model's error
    (_call(8, "no_such_tool", {"x": 1}), {}),  # unknown tool: the model's error
    (_call(9, "calculate"), {}),  # no arguments
    ({"jsonrpc": "2.0", "id": 10, "method": "tools/call",
      "params": {"name": "calculate", "arguments": None}}, {}),
    (_call(11, "calculate", "1+1"), {}),  # arguments not an object
    (_call(12, 7, {}), {}),  # name not a string
    ({"jsonrpc": "2.0", "id": 13, "method": "tools/call", "params": {}}, {}),
    (_call(14, "calculate", {"expression": "1"}, _meta={"progressToken": 1}), {}),
    (_call(15, "calculate", {"expression": "1"}, extra=True), {}),
    ({**_call(16, "calculate", {"expression": "1"}), "extra": 1}, {}),
    ({**_call(17, "calculate", {"expression": "1"}), "jsonrpc": "1.0"}, {}),
    (_call(True, "calculate", {"expression": "1"}), {}),  # a bool is no id
    (_call(None, "calculate", {"expression": "1"}), {}),
    (_call(1.5, "calculate", {"expression": "1"}), {}),
    (_call(2**70, "calculate", {"expression": "1"}), {}),
    (_call(18, "calculate", {"expression": "\u00e9" * 3 + " 1"}), {}),
    ({"jsonrpc": "2.0", "id": 19, "method": "tools/frobnicate"}, {}),
    ([_list(20), _list(21)], {}),  # a batch
    ([], {}),
    (b'{"jsonrpc": "2.0", "id": 22, "method": "tools/li', {}),  # malformed JSON
    (b'{"jsonrpc": "2.0", "id": 23, "method": "tools/call", "params": {"name": "calculate", '
     b'"arguments": {"expression": "\\ud800"}}}', {}),  # a lone surrogate
    (deeply_nested_json(300).encode(), {}),
    (b"x" * (MAX_BODY + 1), {}),  # over the body limit
    (_call(24, "calculate", {"expression": "1" * (MAX_BODY // 2)}), {}),  # large, allowed
    (_list(25), {"Content-Type": "text/plain"}),
    (_list(26), {"Content-Type": "application/json; charset=utf-8"}),
    (_list(27), {"Accept": "text/event-stream"}),
    (_list(28), {"Accept": None}),
    (_list(29), {"Accept": "*/*"}),
    (_list(30), {"Authorization": None}),
    (_list(31), {"Mcp-Protocol-Version": "1999-01-01"}),
    ({"jsonrpc": "2.0", "method": "notifications/initialized"}, {}),
    (_call(32, "answer", {"value": "-1"}), {}),  # a wrong answer ends the episode
    (_call(33, "calculate", {"expression": "1"}), {}),  # after the end
    (_list(34), {}),
]


def _serve(lean: bool) -> Iterator[str]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ENVHUB_MCP_LEAN", "1" if lean else "0")
        app = create_app({"calc": envhub.make("calc", max_turns=100),
                          "mark": envhub.make(MarkEnv),
                          "user": envhub.make(ScriptedUserEnv)},
                         token=TOKEN, max_body_bytes=MAX_BODY, mcp=True)
    with serve_in_thread(app) as base_url:
        yield base_url


@pytest.fixture(scope="module")
def lean_url() -> Iterator[str]:
    yield from _serve(lean=True)


@pytest.fixture(scope="module")
def sdk_url() -> Iterator[str]:
    yield from _serve(lean=False)


# every handshake version's results: a tool list, a result, the model's error, the end
SHORT = [EXCHANGES[0], EXCHANGES[3], EXCHANGES[6], *EXCHANGES[-3:]]


def _exchange(url: str, exchanges: list[tuple[Any, dict[str, str | None]]],
              version: str = HANDSHAKE_PROTOCOL_VERSIONS[-1], env: str = "calc",
              task_id: str = TASKS["calc"],
              ) -> list[tuple[int, list[tuple[str, str]], bytes]]:
    """Every exchange of one MCP session, ids replaced by placeholders."""
    answers = []
    initialize = {**INITIALIZE, "params": {**INITIALIZE["params"], "protocolVersion": version}}
    with httpx.Client(timeout=30) as http:
        opened = http.post(f"{url}/mcp/{env}?task_id={task_id}", json=initialize,
                           headers=HEADERS)
        assert opened.status_code == 200, opened.text
        ids = {opened.headers["mcp-session-id"]: "MCP-SESSION",
               opened.headers["envhub-session-id"]: "ENVHUB-SESSION"}
        session = {"Mcp-Session-Id": opened.headers["mcp-session-id"],
                   "Mcp-Protocol-Version": version}
        for body, changes in [*exchanges, (None, {})]:
            headers: dict[str, str] = {**HEADERS, **session}
            for name, value in changes.items():
                headers.pop(name)
                if value is not None:
                    headers[name] = value
            if body is None:  # the end: DELETE, then a call of the ended session
                assert http.delete(f"{url}/mcp/{env}", headers=headers).status_code == 200
                body = _call(35, "calculate", {"expression": "1"})
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            answer = http.post(f"{url}/mcp/{env}", content=content, headers=headers)
            answers.append(_comparable(answer, ids))
    return answers


Comparable = tuple[int, list[tuple[str, str]], bytes]


def _comparable(answer: httpx.Response, ids: dict[str, str]) -> Comparable:
    """An answer's status, headers (but ``date``) and body, with the session ids it names
    replaced by their placeholders: what the two paths must give alike."""
    text, kept = answer.content, []
    for name, value in answer.headers.items():
        if name != "date":
            for real, placeholder in ids.items():
                value = value.replace(real, placeholder)
            kept.append((name, value))
    for real, placeholder in ids.items():
        text = text.replace(real.encode(), placeholder.encode())
    return answer.status_code, kept, text

def test_lean_answers_are_the_sdks_byte_for_byte(lean_url: str, sdk_url: str) -> None:
    lean, sdk = _exchange(lean_url, EXCHANGES), _exchange(sdk_url, EXCHANGES)
    assert len(lean) == len(sdk) == len(EXCHANGES) + 1
    for (body, changes), lean_answer, sdk_answer in zip(
            [*EXCHANGES, ("after DELETE", {})], lean, sdk, strict=True):
        shown = body[:80] if isinstance(body, bytes) else json.dumps(body)[:200]
        assert lean_answer == sdk_answer, f"{shown} {changes}"
    # the exchanges reach what they are meant to: results, the model's errors, refusals
    statuses = [status for status, _, _ in lean]
    assert statuses.count(200) >= 12 and {400, 401, 406, 413} <= set(statuses)
    assert b'"isError":true' in lean[5][2] and b"unknown tool" in lean[6][2]
    assert b'"envhub/reward":0.0' in lean[-4][2] and b"episode has ended" in lean[-3][2]


@pytest.mark.parametrize("version", HANDSHAKE_PROTOCOL_VERSIONS[:-1])
def test_lean_answers_match_in_every_handshake_version(lean_url: str, sdk_url: str,
                                                        version: str) -> None:
    lean, sdk = _exchange(lean_url, SHORT, version), _exchange(sdk_url, SHORT, version)
    assert lean == sdk
    assert b'"envhub/reward":0.0' in lean[-4][2]


def test_turn_rewards_user_turns_and_tool_changes_match(lean_url: str, sdk_url: str) -> None:
    """``_meta`` beyond ``envhub/done``: turn rewards (negative ones too) and the final
    reward, a user turn's messages, a changed tool list and the list that follows."""
    marks = [(_call(i, "mark", {"item": item}), {}) for i, item in enumerate("aab", 2)]
    marks.append((_call(5, "submit", {}), {}))
    lean = _exchange(lean_url, marks, env="mark", task_id="mark-0")
    assert lean == _exchange(sdk_url, marks, env="mark", task_id="mark-0")
    assert b'"envhub/turn_reward":-0.25' in lean[1][2] and b'"envhub/reward":1.0' in lean[3][2]
    turns = [(_call(2, "answer", {"value": "5"}), {}), (_call(3, "answer", {"value": "15"}), {}),
             (_list(4), {}), (_call(5, LATE_TOOL, {"a": 15, "b": 4}), {}),
             (_call(6, "answer", {"value": "60"}), {})]
    lean = _exchange(lean_url, turns, env="user", task_id="chat-0")
    assert lean == _exchange(sdk_url, turns, env="user", task_id="chat-0")
    assert b"envhub/user_messages" in lean[0][2] and b"envhub/tools_changed" in lean[1][2]
    assert LATE_TOOL.encode() in lean[2][2] and b'"envhub/reward":1.0' in lean[4][2]


# -- the handshake: initialize, notifications/initialized, DELETE, and what follows ---------

VERSION = HANDSHAKE_PROTOCOL_VERSIONS[-1]
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
Step = tuple[str, Any, dict[str, str | None]]  # (HTTP method, body or None, header changes)


def _initialize(request_id: Any = 1, **params: Any) -> dict[str, Any]:
    fields = {**INITIALIZE["params"], "protocolVersion": VERSION, **params}
    return {"jsonrpc": "2.0", "id": request_id, "method": "initialize",
            "params": {name: value for name, value in fields.items() if value is not None}}


def _conversation(url: str, steps: list[Step], task_id: str = TASKS["calc"]
                  ) -> list[tuple[int, list[tuple[str, str]], bytes]]:
    """The answers to ``steps``, in order, on one connection: once an answer names an MCP
    session, the later steps send its id and negotiated version (unless their changes
    drop or set them); session ids are replaced by placeholders (a refused initialize
    names the MCP session it would have opened too)."""
    answers, ids, session = [], {}, {}
    with httpx.Client(timeout=30) as http:
        for method, body, changes in steps:
            headers = {**HEADERS, **session}
            for name, value in changes.items():
                headers.pop(name, None)
                if value is not None:
                    headers[name] = value
            content = (None if body is None else body if isinstance(body, bytes)
                       else json.dumps(body).encode())
            answer = http.request(method, f"{url}/mcp/calc?task_id={task_id}",
                                  content=content, headers=headers)
            for name, placeholder in [("mcp-session-id", "MCP-SESSION"),
                                      ("envhub-session-id", "ENVHUB-SESSION")]:
                if name in answer.headers:
                    ids.setdefault(answer.headers[name], f"{placeholder}-{len(ids)}")
            opened = (answer.json().get("result", {}) if answer.status_code == 200
                      and answer.content.startswith(b"{") else {})
            if "protocolVersion" in opened and not session:
                session = {"Mcp-Session-Id": answer.headers["mcp-session-id"],
                           "Mcp-Protocol-Version": opened["protocolVersion"]}
            answers.append(_comparable(answer, ids))
    return answers


def _opening(body: Any, changes: dict[str, str | None] | None = None) -> list[Step]:
    """An odd initialize; when it opens a session, a call and its DELETE follow."""
    return [("POST", body, changes or {}), ("POST", INITIALIZED, {}),
            ("POST", _call(2, "calculate", {"expression": "1"}), {}), ("DELETE", None, {})]


HANDSHAKES: dict[str, list[Step]] = {
    **{f"version {version}": [
        ("POST", _initialize(protocolVersion=version), {}), ("POST", INITIALIZED, {}),
        ("POST", _list(2), {}), ("DELETE", None, {}), ("DELETE", None, {}),
        ("POST", _call(3, "calculate", {"expression": "1"}), {})]
       for version in [*HANDSHAKE_PROTOCOL_VERSIONS, "1999-01-01", "2026-07-28", "x" * 300]},
    "string id": _opening(_initialize("init-1")),
    "id 2**70": _opening(_initialize(2**70)),
    "bool id": _opening(_initialize(True)),
    "null id": _opening(_initialize(None) | {"id": None}),
    "float id": _opening(_initialize(1.5)),
    "no id": _opening({k: v for k, v in _initialize().items() if k != "id"}),
    "no params": _opening({"jsonrpc": "2.0", "id": 1, "method": "initialize"}),
    "empty params": _opening({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}),
    "version not a string": _opening(_initialize(protocolVersion=20250618)),
    "no clientInfo": _opening(_initialize(clientInfo=None)),
    "clientInfo without version": _opening(_initialize(clientInfo={"name": "x"})),
    "capabilities not an object": _opening(_initialize(capabilities=[])),
    "client capabilities": _opening(_initialize(capabilities={
        "roots": {"listChanged": True}, "sampling": {}, "elicitation": {}})),
    "an unknown parameter": _opening(_initialize(extra=1)),
    "task in _meta": _opening(_initialize(_meta={"envhub/task_id": TASKS["calc"]})),
    "progress token in _meta": _opening(_initialize(_meta={"progressToken": 7})),
    "an unknown field": _opening(_initialize() | {"extra": 1}),
    "jsonrpc 1.0": _opening(_initialize() | {"jsonrpc": "1.0"}),
    "a batch": _opening([_initialize()]),
    "malformed JSON": _opening(b'{"jsonrpc": "2.0", "id": 1, "method": "initia'),
    "text/plain": _opening(_initialize(), {"Content-Type": "text/plain"}),
    "charset": _opening(_initialize(), {"Content-Type": "application/json; charset=utf-8"}),
    "JSON in a list of types": _opening(_initialize(),
                                        {"Content-Type": "text/plain, application/json"}),
    "SSE only": _opening(_initialize(), {"Accept": "text/event-stream"}),
    "no Accept": _opening(_initialize(), {"Accept": None}),
    "Accept */*": _opening(_initialize(), {"Accept": "*/*"}),
    "Accept application/*": _opening(_initialize(), {"Accept": "application/*;q=0.5"}),
    "no token": _opening(_initialize(), {"Authorization": None}),
    "version header too new": _opening(_initialize(), {"Mcp-Protocol-Version": "2026-07-28"}),
    "another task": _opening(_initialize()),  # the task is in initialize's instructions
    "a notification first": [("POST", INITIALIZED, {})],
    "a call first": [("POST", _call(1, "calculate", {"expression": "1"}), {})],
    "notification variants": [
        ("POST", _initialize(), {}), ("POST", INITIALIZED | {"params": {}}, {}),
        ("POST", INITIALIZED, {}), ("POST", INITIALIZED, {"Content-Type": "text/plain"}),
        ("POST", INITIALIZED, {"Accept": "text/event-stream"}),
        ("POST", INITIALIZED, {"Mcp-Protocol-Version": None}),
        ("POST", INITIALIZED | {"id": 9}, {}),
        ("POST", INITIALIZED | {"params": {"_meta": {"x": 1}}}, {}),
        ("POST", _call(2, "calculate", {"expression": "1"}), {}), ("DELETE", None, {})],
    "no notification, then the SDK's methods": [
        ("POST", _initialize(), {}), ("POST", {"jsonrpc": "2.0", "id": 2,
                                               "method": "prompts/list"}, {}),
        ("POST", _call(3, "calculate", {"expression": "1"}), {}),
        ("POST", INITIALIZED, {}),
        ("POST", {"jsonrpc": "2.0", "id": 4, "method": "resources/list"}, {}),
        ("POST", _list(5), {}), ("DELETE", None, {})],
    "the SDK's methods after the notification": [
        ("POST", _initialize(), {}), ("POST", INITIALIZED, {}),
        ("POST", {"jsonrpc": "2.0", "id": 2, "method": "ping"}, {}),
        ("POST", {"jsonrpc": "2.0", "id": 3, "method": "resources/read",
                  "params": {"uri": "envhub://task"}}, {}),
        ("POST", _call(4, "calculate", {"expression": "1"}), {}),
        ("DELETE", None, {}), ("POST", _list(5), {})],
    "a second initialize": [
        ("POST", _initialize(), {}), ("POST", INITIALIZED, {}),
        ("POST", _initialize(2), {}), ("POST", _initialize(3, protocolVersion="2024-11-05"), {}),
        ("POST", _call(4, "calculate", {"expression": "1"}), {}), ("DELETE", None, {})],
    "other HTTP methods": [
        ("POST", _initialize(), {}), ("POST", INITIALIZED, {}),
        ("GET", None, {"Accept": "application/json"}), ("PUT", b"{}", {}),
        ("POST", _call(2, "calculate", {"expression": "1"}), {}), ("DELETE", None, {})],
    "odd DELETEs": [
        ("POST", _initialize(), {}), ("DELETE", None, {"Mcp-Session-Id": None}),
        ("DELETE", None, {"Mcp-Session-Id": "0" * 32}),
        ("DELETE", None, {"Mcp-Protocol-Version": "1999-01-01"}),
        ("DELETE", None, {"Accept": None, "Content-Type": None}),
        ("DELETE", None, {}), ("POST", INITIALIZED, {})],
    "the episode ends before the DELETE": [
        ("POST", _initialize(), {}), ("POST", INITIALIZED, {}),
        ("POST", _call(2, "answer", {"value": "-1"}), {}),
        ("POST", _call(3, "calculate", {"expression": "1"}), {}), ("DELETE", None, {})],
}


TASK_OF = {"another task": "calc-0-00003"}


@pytest.mark.parametrize("name", list(HANDSHAKES))
def test_lean_handshake_is_the_sdks_byte_for_byte(lean_url: str, sdk_url: str,
                                                   name: str) -> None:
    """Every handshake request, well formed or odd, and what follows it: the lean path
    answers initialize, the notification and DELETE itself and starts the SDK's transport
    only for a request it leaves to the SDK (the handshake replayed to it first)."""
    steps, task_id = HANDSHAKES[name], TASK_OF.get(name, TASKS["calc"])
    lean, sdk = _conversation(lean_url, steps, task_id), _conversation(sdk_url, steps, task_id)
    for (method, body, changes), lean_answer, sdk_answer in zip(steps, lean, sdk, strict=True):
        shown = body[:80] if isinstance(body, bytes) else json.dumps(body)[:200]
        assert lean_answer == sdk_answer, f"{method} {shown} {changes}"
