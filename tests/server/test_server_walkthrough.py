"""The README's curl walk-through, run verbatim against ``envhub serve calc``."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import httpx
import pytest

from envhub.testing import serve_in_subprocess

# Keep identical to the README (only the address is substituted).
WALKTHROUGH = """\
curl -s http://127.0.0.1:8000/health
curl -s http://127.0.0.1:8000/v1/environments
curl -s -X POST http://127.0.0.1:8000/v1/sessions -H 'Content-Type: application/json' \\
  -d '{"env": "calc", "task_id": "calc-0-00000", "session_id": "demo-1"}'
curl -s -X POST http://127.0.0.1:8000/v1/sessions/demo-1/step \\
  -H 'Content-Type: application/json' \\
  -d '{"tool_calls": [{"id": "c1", "name": "calculate", "arguments": {"expression": "805 - 273"}}]}'
curl -s -X POST http://127.0.0.1:8000/v1/sessions/demo-1/step \\
  -H 'Content-Type: application/json' \\
  -d '{"tool_calls": [{"id": "c2", "name": "answer", "arguments": "{\\"value\\": \\"532\\"}"}]}'
curl -s -X POST http://127.0.0.1:8000/v1/sessions/demo-1/close
"""


@pytest.fixture
def served_calc() -> Iterator[str]:
    with serve_in_subprocess("calc") as url:
        yield url


def test_serve_takes_token_and_budgets_from_its_command_line() -> None:
    with serve_in_subprocess(
        "calc", "--max-turns", "3", "--env-arg", "num_tasks=5", token="from-env"
    ) as url:
        assert httpx.get(f"{url}/v1/environments").json()["error"]["code"] == "unauthorized"
        envs = httpx.get(
            f"{url}/v1/environments", headers={"authorization": "Bearer from-env"}
        ).json()["environments"]
        assert envs[0]["budgets"]["max_turns"] == 3
        assert envs[0]["tasks"] == 5 and envs[0]["options"] == {"num_tasks": 5}


def test_curl_walkthrough(served_calc: str) -> None:
    script = WALKTHROUGH.replace("http://127.0.0.1:8000", served_calc)
    commands = script.replace("\\\n", "").strip().splitlines()
    outputs = []
    for command in commands:
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        outputs.append(json.loads(done.stdout))
    health, envs, start, first, second, closed = outputs
    assert health["status"] == "ok"
    assert [e["name"] for e in envs["environments"]] == ["calc"]
    assert start["session_id"] == "demo-1"
    assert "805" in start["messages"][-1]["content"]
    assert first["observations"][0]["content"] == "532"
    assert second["done"] and second["reward"] == 1.0
    assert closed["reward"] == 1.0 and closed["stop_reason"] == "terminal_tool"
