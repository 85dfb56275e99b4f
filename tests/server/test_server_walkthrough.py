"""The docs' curl walk-through (docs/serving.md), run verbatim against ``envhub serve calc``."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from envhub.testing import serve_in_subprocess

# The page that shows the walk-through; the test runs its commands as written there.
SERVING_PAGE = Path(__file__).resolve().parents[2] / "docs" / "serving.md"


def walkthrough() -> str:
    """The curl commands of the page's walk-through block (the first bash block after
    "Walk-through"), without the ``envhub serve`` line the fixture stands in for."""
    text = SERVING_PAGE.read_text("utf-8")
    block = text[text.index("Walk-through"):].split("```bash\n", 1)[1].split("```", 1)[0]
    return "".join(line for line in block.splitlines(keepends=True)
                   if not line.startswith("envhub serve"))


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
    script = walkthrough().replace("http://127.0.0.1:8000", served_calc)
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
