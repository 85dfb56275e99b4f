"""The optional python tool: absent unless the operator turns it on, then run in the
configured sandbox backend (local, and bwrap without network)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

import envhub
from envhub.sandboxes.bwrap import bwrap_problem


async def _run_code(code: str, **options: Any) -> tuple[list[str], str, bool]:
    env = envhub.make("reasoning_gym", datasets="gcd", size=1, **options)
    try:
        async with env.open("gcd-0-0000") as session:
            tools = [tool["function"]["name"] for tool in (await env.info()).tools]
            result = await session.step(
                [{"id": "1", "name": "python", "arguments": {"code": code}}]
            )
            observation = result.observations[0]
            return tools, observation.content, observation.is_error
    finally:
        await env.aclose()


def test_python_tool_is_off_by_default() -> None:
    tools, content, is_error = asyncio.run(_run_code("print(1)"))
    assert tools == ["answer"]
    assert is_error and "python" in content


def _backend_or_skip(backend: str) -> None:
    if backend == "bwrap" and (problem := bwrap_problem()):
        if os.environ.get("ENVHUB_REQUIRE_BWRAP") == "1":
            pytest.fail(f"bwrap required (ENVHUB_REQUIRE_BWRAP=1) but {problem}")
        pytest.skip(problem)


@pytest.mark.parametrize("backend", ["local", "bwrap"])
def test_python_tool_runs_in_the_sandbox(backend: str) -> None:
    _backend_or_skip(backend)
    tools, content, is_error = asyncio.run(
        _run_code("import math\nprint(math.gcd(84, 36))", python=True, sandbox=backend)
    )
    assert tools == ["answer", "python"]
    assert not is_error and content.startswith("exit code 0") and "12" in content
    _, content, _ = asyncio.run(_run_code("raise SystemExit(3)", python=True, sandbox=backend))
    assert content.startswith("exit code 3")
    _, content, _ = asyncio.run(
        _run_code("while True: pass", python=True, sandbox=backend, python_timeout_s=1)
    )
    assert content.startswith("timed out after 1s")


def test_python_tool_under_bwrap_has_no_network() -> None:
    _backend_or_skip("bwrap")
    code = (
        "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), timeout=2)\n"
        "    print('connected')\nexcept OSError as exc:\n    print('no network', exc)"
    )
    _, content, _ = asyncio.run(_run_code(code, python=True, sandbox="bwrap"))
    assert "no network" in content
