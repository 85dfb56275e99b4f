"""The MCP Inspector's CLI (Node; ``.ci/inspector_setup.sh`` installs it), the client users
reach for first, lists and calls tools on a real ``envhub serve --mcp`` over Streamable
HTTP and on ``envhub mcp`` over stdio, and reads what the envhub API gives.

Without Node or the Inspector these skip, unless CI's ``ENVHUB_REQUIRE_MCP_INSPECTOR=1``
makes that a failure."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import envhub
from envhub.runtime.cache import cache_root
from tests.bridges import unless_required
from tests.fleet.serve_processes import serve_processes
from tests.mcp.clients import ROOT, TASKS

INSPECTOR = Path(os.environ.get(
    "ENVHUB_MCP_INSPECTOR",
    cache_root("mcp-inspector") / "node_modules/@modelcontextprotocol/inspector-cli/build/index.js",
))
TASK = envhub.make("calc").tasks.get(TASKS["calc"])
GOLD = {call.name: call.arguments for call in TASK.gold_actions}


@pytest.fixture(scope="module")
def node() -> str:
    node = shutil.which("node")
    if node is None or not INSPECTOR.exists():
        pytest.skip(unless_required("ENVHUB_REQUIRE_MCP_INSPECTOR",
                                    f"no Node or no MCP Inspector CLI at {INSPECTOR} "
                                    "(bash .ci/inspector_setup.sh)"))
    return node


@pytest.fixture(scope="module")
def mcp_url() -> Iterator[str]:
    with serve_processes(1, ["calc"], ["--mcp"]) as (server,):
        yield f"{server.url}/calc/mcp?task_id={TASK.id}"


def _inspect(node: str, target: list[str], method: str, *args: str) -> Any:
    """The Inspector CLI's JSON answer to one ``method`` (its own MCP session): ``target``
    is a URL, or a command and its arguments (an ``envhub mcp`` to start)."""
    if target[0].startswith("http"):
        command = [node, str(INSPECTOR), *target, "--transport", "http", "--method", method, *args]
    else:
        command = [node, str(INSPECTOR), target[0], "--method", method, *args, "--", *target[1:]]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def _tool_args(arguments: dict[str, Any]) -> list[str]:
    return ["--tool-arg", *(f"{name}={value}" for name, value in arguments.items())]


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_the_inspector_lists_and_calls_tools(node: str, transport: str,
                                             request: pytest.FixtureRequest) -> None:
    if transport == "http":
        target = [request.getfixturevalue("mcp_url")]
    else:
        target = [sys.executable, "-m", "envhub.cli", "mcp", "calc", "--task", TASK.id]
    tools = _inspect(node, target, "tools/list")["tools"]
    assert [(t["name"], t["inputSchema"]) for t in tools] == [
        (f["function"]["name"], f["function"]["parameters"]) for f in envhub.make("calc").tools
    ]
    # one episode per Inspector call: the gold answer at once scores 1
    answered = _inspect(node, target, "tools/call", "--tool-name", "answer",
                        *_tool_args(GOLD["answer"]))
    assert answered["content"] == [{"type": "text", "text": "answer recorded"}]
    assert answered["_meta"]["envhub/done"] and answered["_meta"]["envhub/reward"] == 1.0
    if transport == "http":  # the model's error (stdio: an interpreter start a call)
        refused = _inspect(node, target, "tools/call", "--tool-name", "calculate",
                           "--tool-arg", "expression=1 +")
        assert refused["isError"] and not refused["_meta"]["envhub/done"]
