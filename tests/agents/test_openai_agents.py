"""The OpenAI Agents SDK plays calc episodes: the scripted model server (real uvicorn)
plays the model, its tool calls reach the session through the episode's MCP endpoint,
and every model call goes through the capture proxy into the trajectory."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import envhub
import envhub.cli.rollout
from envhub.agents import (
    AgentEpisode,
    AgentEpisodeRunner,
    AgentLoop,
    CommandAgentRunner,
    OpenAIAgentsRunner,
    make_agent,
)
from envhub.cli._app import app
from envhub.clients.local import LocalEnvironment
from envhub.errors import InvalidRequest
from envhub.policies import ReferencePolicy, SamplingParams
from envhub.rollout import EpisodeSpec, run
from envhub.task import Task
from envhub.trajectory import Trajectory, read_trajectories
from tests.rollout.helpers import openai_policy
from tests.rollout.scripted_server import (
    MALFORMED_CALL,
    ScriptConfig,
    ScriptedServer,
    ThreadedUvicorn,
    tokenize,
)

TASK_ID = "calc-0-00000"


def gold_script(task: Task) -> list[dict[str, Any]]:
    """The model's turns: the task's gold calls, one per turn (the last is ``answer``)."""
    return [
        {"tool_calls": [{"name": call.name, "arguments": json.dumps(call.arguments)}]}
        for call in task.gold_actions
    ]


def reply_ids(step: dict[str, Any]) -> list[int]:
    """The completion ids the scripted server returns for a scripted turn."""
    message = {
        "role": "assistant",
        "content": step.get("content"),
        "tool_calls": [{"function": call} for call in step.get("tool_calls", [])],
    }
    return tokenize(message)


def episode_runner(env: LocalEnvironment, server: ScriptedServer, **options: Any
                   ) -> AgentEpisodeRunner:
    policy = openai_policy(server.base_url)
    return AgentEpisodeRunner(env, policy, OpenAIAgentsRunner(), env_version="test", **options)


async def run_one(runner: AgentEpisodeRunner, task_id: str = TASK_ID) -> Trajectory:
    try:
        return await runner.run(EpisodeSpec(task_id, 0, f"{task_id}#0"))
    finally:
        await runner.policy.aclose()


async def test_agent_solves_calc_through_proxy_and_mcp(
    scripted: Callable[..., ScriptedServer], calc: LocalEnvironment
) -> None:
    task = await calc.task(TASK_ID)
    script = gold_script(task)
    server = scripted(ScriptConfig(turns=script, token_ids=True))
    policy = openai_policy(server.base_url, sampling=SamplingParams(temperature=0.6))
    try:  # two samples at once: each has its own session, MCP endpoint and proxy
        result = await run(calc, policy, [TASK_ID], group_size=2, concurrency=2,
                           turn_loop=AgentLoop(make_agent("openai-agents")), policy_version=3)
    finally:
        await policy.aclose()
    assert result.trajectories is not None and len(result.trajectories) == 2
    for trajectory in result.trajectories:
        assert not trajectory.masked, trajectory.error
        assert trajectory.reward == 1.0
        assert trajectory.stop_reason == "terminal_tool"
        assert trajectory.model == "scripted" and trajectory.sampling["temperature"] == 0.6
        assert trajectory.metrics.tool_calls == 2 and trajectory.metrics.tool_errors == 0
        assert {tool["function"]["name"] for tool in trajectory.tools} == {"answer", "calculate"}
        messages = trajectory.messages
        assert messages[:2] == task.prompt  # the task's messages, as the agent sent them
        # the gold calls, each answered by the environment through MCP, then the agent's
        # last model call (the episode had ended; the model said "done")
        calls = [m["tool_calls"][0] for m in messages if m.get("tool_calls")]
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                for c in calls] == [(g.name, g.arguments) for g in task.gold_actions]
        results = [m for m in messages if m["role"] == "tool"]
        assert [r["tool_call_id"] for r in results] == [c["id"] for c in calls]
        assert "532" in json.dumps(results[0]["content"])
        assert messages[-1] == {"role": "assistant", "content": "done"}
        # one turn per model call, with exactly the ids and logprobs the server returned
        assert len(trajectory.turns) == 3
        for index, turn in enumerate(trajectory.turns):
            step = script[index] if index < len(script) else {"content": "done"}
            assert messages[turn.message_index]["role"] == "assistant"
            prompt = messages[: turn.message_index]
            assert turn.prompt_token_ids == [t for m in prompt for t in tokenize(m)]
            assert turn.completion_token_ids == reply_ids(step)
            assert turn.completion_logprobs == [
                -(i % 7) / 10 for i in range(len(reply_ids(step)))
            ]
            assert turn.policy_version == 3
            assert turn.prefix_ok is (None if index == 0 else True)
        assert trajectory.usage.completion_tokens == 3 * 7
    assert server.stats.models == {"scripted": 6}
    assert server.stats.token_fields_requested == 6


async def test_model_mistakes_stay_the_models(
    scripted: Callable[..., ScriptedServer], calc: LocalEnvironment
) -> None:
    """Arguments that are not JSON, then a tool that does not exist: both are errors the
    model reads, and the episode goes on to its correct answer."""
    task = await calc.task(TASK_ID)
    unknown = {"tool_calls": [{"name": "no_such_tool", "arguments": "{}"}]}
    script = [{"tool_calls": [MALFORMED_CALL]}, unknown, *gold_script(task)]
    server = scripted(ScriptConfig(turns=script))
    trajectory = await run_one(episode_runner(calc, server))
    assert not trajectory.masked, trajectory.error
    assert trajectory.reward == 1.0 and len(trajectory.turns) == 5
    malformed, unknown_tool = [m for m in trajectory.messages if m["role"] == "tool"][:2]
    assert "Invalid JSON" in json.dumps(malformed["content"])
    assert "not found" in json.dumps(unknown_tool["content"])


async def test_final_answer_is_handed_to_the_session(
    scripted: Callable[..., ScriptedServer], calc: LocalEnvironment
) -> None:
    server = scripted(ScriptConfig(turns=[{"content": "It is 532."}]))
    trajectory = await run_one(episode_runner(calc, server))
    assert not trajectory.masked
    assert trajectory.stop_reason == "final_answer"
    assert trajectory.reward == 0.0  # calc scores its answer tool, not text
    assert len(trajectory.turns) == 1
    assert trajectory.messages[-1] == {"role": "assistant", "content": "It is 532."}


async def test_turn_cap_stops_the_agent(
    scripted: Callable[..., ScriptedServer], calc: LocalEnvironment
) -> None:
    calculate = {"tool_calls": [{"name": "calculate", "arguments": '{"expression": "1 + 1"}'}]}
    server = scripted(ScriptConfig(turns=[calculate] * 5))
    trajectory = await run_one(episode_runner(calc, server, max_turns=2))
    assert not trajectory.masked
    assert trajectory.stop_reason == "max_turns" and trajectory.reward == 0.0
    assert len(trajectory.turns) == 2 and server.stats.requests == 2


async def test_unreachable_model_masks_the_episode(calc: LocalEnvironment) -> None:
    dead = ScriptedServer().start()
    dead.stop()
    trajectory = await run_one(episode_runner(calc, dead))
    assert trajectory.masked and trajectory.reward is None
    assert trajectory.stop_reason == "model_error"
    assert trajectory.error is not None and trajectory.error.kind == "policy_transient"
    assert trajectory.metrics.episode_attempts == 1  # a model failure is not retried


async def test_environment_failure_behind_mcp_masks_the_episode(
    scripted: Callable[..., ScriptedServer],
) -> None:
    env = envhub.make("tests.rollout.faulty_envs:SandboxDies", num_tasks=3)
    calculate = {"tool_calls": [{"name": "calculate", "arguments": '{"expression": "1 + 1"}'}]}
    server = scripted(ScriptConfig(turns=[calculate]))
    runner = episode_runner(env, server, max_env_attempts=2)
    trajectory = await run_one(runner, (await env.task_ids(None))[0])
    assert trajectory.masked and trajectory.reward is None
    assert trajectory.stop_reason == "env_error"
    assert trajectory.error is not None and trajectory.error.kind == "sandbox_error"
    assert "injected" in trajectory.error.message
    assert trajectory.metrics.episode_attempts == 2
    assert trajectory.metrics.retried_errors == {"sandbox_error": 1}


class CrashingAgent:
    """A framework hook that makes one model call, then crashes (a bug in the agent)."""

    name = "crashing"

    async def run(self, episode: AgentEpisode) -> None:
        import openai

        client = openai.AsyncOpenAI(base_url=episode.base_url, api_key=episode.api_key)
        await client.chat.completions.create(model=episode.model, messages=episode.messages)
        await client.close()
        raise RuntimeError("the agent process died")


class SilentAgent:
    """A hook that never calls the model through the proxy."""

    name = "silent"

    async def run(self, episode: AgentEpisode) -> None:
        await asyncio.sleep(0)


@pytest.mark.parametrize(
    ("agent", "turns", "message"),
    [(CrashingAgent(), 1, "the agent process died"), (SilentAgent(), 0, "without calling")],
)
async def test_agent_crash_is_masked_after_retries(
    scripted: Callable[..., ScriptedServer], calc: LocalEnvironment, agent: Any, turns: int,
    message: str,
) -> None:
    server = scripted(ScriptConfig(turns=[{"content": "hi"}]))
    runner = AgentEpisodeRunner(
        calc, openai_policy(server.base_url), agent, env_version="test", max_env_attempts=2
    )
    trajectory = await run_one(runner)
    assert trajectory.masked and trajectory.reward is None
    assert trajectory.stop_reason == "env_error"
    assert trajectory.error is not None and trajectory.error.kind == "agent_error"
    assert message in trajectory.error.message
    assert trajectory.metrics.episode_attempts == 2
    assert len(trajectory.turns) == turns  # what the last attempt recorded is kept


def test_the_proxy_needs_the_openai_policy(calc: LocalEnvironment) -> None:
    with pytest.raises(InvalidRequest, match="--policy openai"):
        AgentEpisodeRunner(calc, ReferencePolicy(), OpenAIAgentsRunner())


def test_make_agent_names_the_fix() -> None:
    assert isinstance(make_agent("openai-agents"), OpenAIAgentsRunner)
    assert make_agent("tests.agents.test_openai_agents:SilentAgent").name == "silent"
    for bad in ("langchain", "no.such.module:Agent", "tests.agents.test_openai_agents:Nope"):
        with pytest.raises(InvalidRequest):
            make_agent(bad)


async def test_cli_rollout_with_agent(
    scripted: Callable[..., ScriptedServer], calc: LocalEnvironment, tmp_path: Path
) -> None:
    task = await calc.task(TASK_ID)
    server = scripted(ScriptConfig(turns=gold_script(task), token_ids=True))
    out = tmp_path / "agent.jsonl"
    args = ["rollout", "calc", "--agent", "openai-agents", "--model", "scripted",
            "--base-url", server.base_url, "--tasks", TASK_ID, "--output", str(out)]
    result = await asyncio.to_thread(CliRunner().invoke, app, args)
    assert result.exit_code == 0, result.output
    [trajectory] = read_trajectories(out)
    assert trajectory.reward == 1.0 and len(trajectory.turns) == 3
    assert trajectory.turns[0].completion_token_ids == reply_ids(gold_script(task)[0])
    # a hook that is not there is a clear usage error
    bad = await asyncio.to_thread(CliRunner().invoke, app, [*args[:-1], str(tmp_path / "x"),
                                                             "--agent", "nope"])
    assert bad.exit_code == 2 and "unknown agent 'nope'" in bad.output


async def test_deadline_cancels_agent_episodes_cleanly(
    scripted: Callable[..., ScriptedServer], calc: LocalEnvironment
) -> None:
    """Episodes in flight at the run's time limit are cancelled: the agent, its MCP
    endpoint and its proxy stop, the sessions are aborted, and nothing keeps running."""
    server = scripted(ScriptConfig(latency_s=30))
    policy = openai_policy(server.base_url)
    try:
        result = await run(calc, policy, "train[0:3]",
                           turn_loop=AgentLoop(OpenAIAgentsRunner()), concurrency=3,
                           time_limit_s=0.5)
    finally:
        await policy.aclose()
    assert result.summary.stopped == "deadline" and result.summary.missing == 3
    await asyncio.sleep(0)
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []


@pytest.mark.parametrize("transport", ["ws", "http"])
async def test_agent_episodes_on_a_remote_environment(
    scripted: Callable[..., ScriptedServer], calc: LocalEnvironment, tmp_path: Path,
    transport: str,
) -> None:
    """The MCP endpoint serves a session of any transport: here one on `envhub serve`."""
    server_app = pytest.importorskip("envhub.server")
    task = await calc.task(TASK_ID)
    model = scripted(ScriptConfig(turns=gold_script(task), token_ids=True))
    out = tmp_path / "remote-agent.jsonl"
    with ThreadedUvicorn(server_app.create_app(["calc"]), lifespan="on") as env_server:
        args = ["rollout", "calc", "--agent", "openai-agents", "--env-url", env_server.url,
                "--env-transport", transport, "--model", "scripted", "--base-url",
                model.base_url, "--tasks", TASK_ID, "--group-size", "2", "--output", str(out)]
        result = await asyncio.to_thread(CliRunner().invoke, app, args)
    assert result.exit_code == 0, result.output
    trajectories = list(read_trajectories(out))
    assert len(trajectories) == 2
    for trajectory in trajectories:
        assert trajectory.reward == 1.0 and trajectory.served_by == env_server.url
        assert [t.completion_token_ids for t in trajectory.turns][:2] == [
            reply_ids(step) for step in gold_script(task)
        ]


COMMAND_AGENT = Path(__file__).with_name("command_agent.py")


@pytest.mark.parametrize("crash", [False, True])
async def test_agent_as_a_child_process(
    scripted: Callable[..., ScriptedServer], calc: LocalEnvironment, crash: bool
) -> None:
    """``command:ARGV``: the agent runs in its own process, reached through the environment
    variables and stdin; a child that exits non-zero is a crash, masked with its stderr."""
    task = await calc.task(TASK_ID)
    server = scripted(ScriptConfig(turns=gold_script(task), token_ids=True))
    argv = f"{sys.executable} {COMMAND_AGENT}" + (" --crash" if crash else "")
    runner = AgentEpisodeRunner(calc, openai_policy(server.base_url),
                                make_agent(f"command:{argv}"), env_version="test",
                                max_env_attempts=1)
    trajectory = await run_one(runner)
    if crash:
        assert trajectory.masked and trajectory.error is not None
        assert trajectory.error.kind == "agent_error"
        assert "exited with 3" in trajectory.error.message
        assert "the agent's framework blew up" in trajectory.error.message
        return
    assert not trajectory.masked, trajectory.error
    assert trajectory.reward == 1.0 and len(trajectory.turns) == 3
    assert [t.completion_token_ids for t in trajectory.turns][:2] == [
        reply_ids(step) for step in gold_script(task)
    ]


async def test_a_hanging_agent_process_is_killed(
    scripted: Callable[..., ScriptedServer], calc: LocalEnvironment
) -> None:
    server = scripted(ScriptConfig(turns=[{"content": "hi"}]))
    hang = CommandAgentRunner([sys.executable, "-c", "import time; time.sleep(600)"],
                              timeout_s=0.5)
    runner = AgentEpisodeRunner(calc, openai_policy(server.base_url), hang,
                                env_version="test", max_env_attempts=1)
    trajectory = await run_one(runner)
    assert trajectory.masked and trajectory.error is not None
    assert trajectory.error.kind == "agent_error"
    assert "ran past its 0.5s limit and was killed" in trajectory.error.message
