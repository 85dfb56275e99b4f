"""The trust boundary around an external agent: what its process inherits from envhub's,
and who may reach its episode's MCP endpoint (issue 29, items 7 and 8)."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from envhub.agents import AgentEpisode, AgentEpisodeRunner, CommandAgentRunner, make_agent
from envhub.cli._app import app
from envhub.clients.local import LocalEnvironment
from envhub.errors import InvalidRequest
from envhub.rollout import EpisodeSpec
from envhub.trajectory import Trajectory, TrajectoryWriter, export_trajectories
from tests.mcp.clients import http_session
from tests.rollout.helpers import openai_policy
from tests.rollout.scripted_server import ScriptConfig, ScriptedServer

TASK_ID = "calc-0-00000"
ENV_DUMP_AGENT = Path(__file__).with_name("env_dump_agent.py")


async def run_one(runner: AgentEpisodeRunner) -> Trajectory:
    try:
        return await runner.run(EpisodeSpec(TASK_ID, 0, f"{TASK_ID}#0"))
    finally:
        await runner.policy.aclose()


async def dumped_environment(
    scripted: Callable[..., ScriptedServer], calc: LocalEnvironment, dump: Path, **options: Any
) -> dict[str, str]:
    """The environment a command agent ran with, in a real episode that it completed."""
    server = scripted(ScriptConfig(turns=[{"content": "done"}]))
    agent = CommandAgentRunner([sys.executable, str(ENV_DUMP_AGENT), str(dump)], **options)
    trajectory = await run_one(
        AgentEpisodeRunner(
            calc, openai_policy(server.base_url), agent, env_version="test", max_env_attempts=1
        )
    )
    assert not trajectory.masked, trajectory.error  # it reached the model with what it got
    environment: dict[str, str] = json.loads(await asyncio.to_thread(dump.read_text))
    return environment


async def test_envhubs_secrets_do_not_reach_a_command_agent(
    scripted: Callable[..., ScriptedServer],
    calc: LocalEnvironment,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """envhub's secrets stay in envhub's process: the child sees the basics and the
    episode's own variables, nothing else of envhub's environment."""
    monkeypatch.setenv("ENVHUB_TOKEN", "secret")
    monkeypatch.setenv("FOO_SECRET", "x")
    monkeypatch.setenv("OPENAI_API_KEY", "the-operators-key")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    seen = await dumped_environment(scripted, calc, tmp_path / "env.json")
    assert "ENVHUB_TOKEN" not in seen and "FOO_SECRET" not in seen
    assert seen["OPENAI_API_KEY"] != "the-operators-key"  # the proxy's per-episode key
    assert seen["OPENAI_BASE_URL"].startswith("http://127.0.0.1:")
    assert len(seen["ENVHUB_MCP_TOKEN"]) >= 32  # the episode endpoint's own token
    assert seen["PATH"] == os.environ["PATH"] and seen["LC_ALL"] == "C.UTF-8"


async def test_the_operator_names_what_else_a_command_agent_gets(
    scripted: Callable[..., ScriptedServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--agent-env NAME`` passes one more variable on; an agent that is no child process
    has nothing to pass it to."""
    monkeypatch.setenv("AGENT_CONFIG", "passed-on")
    monkeypatch.setenv("FOO_SECRET", "x")
    server = scripted(ScriptConfig(turns=[{"content": "done"}]))
    dump = tmp_path / "env.json"
    args = [
        "rollout",
        "calc",
        "--model",
        "scripted",
        "--base-url",
        server.base_url,
        "--tasks",
        TASK_ID,
        "--output",
        str(tmp_path / "out.jsonl"),
        "--agent",
        f"command:{shlex.join([sys.executable, str(ENV_DUMP_AGENT), str(dump)])}",
        "--agent-env",
        "AGENT_CONFIG",
    ]
    result = await asyncio.to_thread(CliRunner().invoke, app, args)
    assert result.exit_code == 0, result.output
    seen = json.loads(await asyncio.to_thread(dump.read_text))
    assert seen["AGENT_CONFIG"] == "passed-on" and "FOO_SECRET" not in seen
    with pytest.raises(InvalidRequest, match="command: agent"):
        make_agent("openai-agents", pass_env=["AGENT_CONFIG"])


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "another-local-process", "version": "1"},
    },
}


class ProbedAgent:
    """An agent whose episode endpoint is probed while it runs: first as another local
    process would (no token, a wrong one), then it plays with its own token, making one
    call no model call asked for (as a framework's own code, or an intruder holding the
    token, could) and the call its one model reply asks for."""

    name = "probed"

    def __init__(self) -> None:
        self.statuses: list[int] = []

    async def run(self, episode: AgentEpisode) -> None:
        import httpx2
        import openai

        accept = {"Accept": "application/json, text/event-stream"}
        async with httpx2.AsyncClient(timeout=30) as http:
            for credentials in ({}, {"Authorization": "Bearer not-the-token"}):
                reply = await http.post(
                    episode.mcp_url, json=INITIALIZE, headers={**accept, **credentials}
                )
                self.statuses.append(reply.status_code)
        async with http_session(episode.mcp_url, token=episode.mcp_token) as tools:
            await tools.call_tool("calculate", {"expression": "1 + 1"})
            model = openai.AsyncOpenAI(base_url=episode.base_url, api_key=episode.api_key)
            try:
                reply = await model.chat.completions.create(
                    model=episode.model, messages=episode.messages
                )
            finally:
                await model.close()
            for call in reply.choices[0].message.tool_calls or []:
                function = call.function  # type: ignore[union-attr]
                await tools.call_tool(function.name, json.loads(function.arguments))


async def test_the_episode_endpoint_needs_its_token_and_every_call_is_recorded(
    scripted: Callable[..., ScriptedServer], calc: LocalEnvironment, tmp_path: Path
) -> None:
    """Only the agent the endpoint serves may play the episode, and the trajectory records
    every call the session ran, including one that no model call asked for (and keeps it
    when exported)."""
    asked = {"tool_calls": [{"name": "calculate", "arguments": '{"expression": "2 + 3"}'}]}
    server = scripted(ScriptConfig(turns=[asked]))
    agent = ProbedAgent()
    runner = AgentEpisodeRunner(
        calc, openai_policy(server.base_url), agent, env_version="test", max_env_attempts=1
    )
    trajectory = await run_one(runner)
    assert agent.statuses == [401, 401]
    assert not trajectory.masked, trajectory.error
    assert trajectory.metrics.tool_calls == 2
    assert trajectory.session_calls is not None
    assert [
        (call.name, call.arguments, call.content, call.turn) for call in trajectory.session_calls
    ] == [
        ("calculate", {"expression": "1 + 1"}, "2", None),  # no model call asked for it
        ("calculate", {"expression": "2 + 3"}, "5", 0),  # the first model reply's
    ]
    written = tmp_path / "agent.jsonl"
    with TrajectoryWriter(written) as writer:
        writer.write(trajectory)
    exported = tmp_path / "agent.parquet"
    assert await asyncio.to_thread(export_trajectories, written, exported, "parquet") == 1
    [row] = pq.read_table(exported).to_pylist()
    assert [call["turn"] for call in json.loads(row["session_calls"])] == [None, 0]
