"""The reverse direction: an envhub environment used from verifiers, through envhub's MCP
door. ``envhub serve calc --mcp`` (the real CLI) serves calc; verifiers' own ``vf-eval``
runs a taskset whose toolset names that server's URL, with its null chat harness and the
scripted model calling envhub's ``calculate`` and ``answer`` tools."""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest
from envhub_verifiers import default_python

from envhub.testing import serve_in_subprocess
from tests.rollout.scripted_server import ScriptConfig, ScriptedServer

TASKSETS = Path(__file__).with_name("vf_tasksets")
SCRIPT = [
    {"tool_calls": [{"name": "calculate", "arguments": '{"expression": "2 + 3"}'}]},
    {"tool_calls": [{"name": "answer", "arguments": '{"value": "5"}'}]},
    {"content": "5"},
]


def _metric(text: str, name: str) -> float:
    match = re.search(rf'^{name}\{{env="calc"\}} ([0-9.e+]+)$', text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


@pytest.mark.slow  # verifiers' own eval: a chat program per rollout
def test_an_envhub_environment_from_verifiers(tmp_path: Path) -> None:
    with serve_in_subprocess("calc", "--mcp") as url, ScriptedServer(
        ScriptConfig(turns=SCRIPT)
    ) as model:
        done = subprocess.run(
            [str(Path(default_python()).with_name("vf-eval")), "vf_envhub_calc",
             "-m", "scripted", "--client.base-url", model.base_url,
             "--env.agent.harness.id", "null", "--env.agent.runtime.type", "subprocess",
             "--no-push", "-o", str(tmp_path)],
            env={**os.environ, "PYTHONPATH": str(TASKSETS), "PRIME_API_KEY": "scripted",
                 "ENVHUB_CALC_MCP_URL": f"{url}/calc/mcp"},
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        with urllib.request.urlopen(f"{url}/metrics") as answer:
            metrics = answer.read().decode()
    (line,) = next(tmp_path.rglob("traces.jsonl")).read_text().splitlines()
    (trace,) = json.loads(line)["traces"]
    assert trace["ok"], trace["errors"]
    assert {t["name"] for t in trace["tools"]} == {"calculate", "answer"}  # envhub's tools
    assert trace["rewards"]["computed_by_envhub"]["score"] == 1.0
    # one MCP session of verifiers' harness was one envhub episode, ended by `answer`
    assert _metric(metrics, "envhub_sessions_created_total") == 1.0
