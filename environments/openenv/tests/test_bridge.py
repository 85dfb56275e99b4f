"""OpenEnv environments, served by OpenEnv's own code in its own venv, run through the
bridge: ``envhub check`` passes, a rollout against the scripted model server has exact
counts, rewards and rubric components come through, and malformed calls are error
observations the model reads.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import envhub
import envhub.cli.rollout
from envhub.cli._app import app
from envhub.policies.openai_compat import OpenAIPolicy
from envhub.testing import call_tool, check_environment
from envhub.trajectory import read_records
from tests.rollout.scripted_server import ScriptConfig

HERE = Path(__file__).resolve().parent
GUESS_TASKS = HERE / "guess.jsonl"
ADDER_TASKS = HERE / "adder.jsonl"
CLI = [sys.executable, "-m", "envhub.cli"]


def target(seed: int) -> int:
    """The secret number of ``guess`` for ``seed`` (as openenv_servers.py draws it)."""
    return random.Random(seed).randrange(100)


def test_envhub_check_passes_through_the_bridge(guess_url: str) -> None:
    """The reference policy (each task's gold guess) scores 1, a no-op 0: `envhub check`
    in its own process, against the OpenEnv server the bridge started here."""
    proc = subprocess.run(
        [*CLI, "check", "openenv", "--env-arg", f"url={guess_url}",
         "--env-arg", f"tasks={GUESS_TASKS}"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ok: 3 tasks of openenv: reference scores 1, no-op scores 0" in proc.stderr


def test_an_mcp_environment_passes_check(adder_command: list[str]) -> None:
    # a client, not a name: check_environment would release the shared servers after it
    check_environment(envhub.make("openenv", command=adder_command, tasks=str(ADDER_TASKS)))


def test_bad_options_are_one_line_errors() -> None:
    result = CliRunner().invoke(app, ["check", "openenv", "--env-arg", "seeds=3"])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0, result.output
    assert "openenv needs the OpenEnv server as url=, command= or image=" in result.output


async def test_rollout_over_the_bridge_has_exact_counts(
    scripted, guess_url: str, tmp_path: Path
) -> None:
    """Per episode: a guess of 50, arguments that are not JSON, a guess out of range
    (both error observations, never sent), then a final answer; the reward is the one
    step's, as the server's rubric computed it."""
    server = scripted(ScriptConfig(turns=[
        {"tool_calls": [{"name": "step", "arguments": '{"number": 50}'}]},
        {"tool_calls": [{"name": "step", "arguments": '{"number": 5'}]},
        {"tool_calls": [{"name": "step", "arguments": '{"number": 500}'}]},
        {"content": "I give up"},
    ]))  # fmt: skip
    out = tmp_path / "guess.jsonl"
    env = envhub.make("openenv", url=guess_url, tasks=str(GUESS_TASKS))
    policy = OpenAIPolicy("scripted", [server.base_url])
    try:
        await envhub.rollout.run(env, policy, group_size=2, concurrency=3, output=out)
    finally:
        await policy.aclose()
    records = list(read_records(out))
    assert len(records) == 6 and not any(r["masked"] for r in records)
    assert server.stats.requests == 6 * 4
    for record in records:
        seed = int(record["task_id"].split("-")[1])
        step = 0.2 * (1 - abs(50 - target(seed)) / 100)
        assert [t["reward"] for t in record["turns"]] == [pytest.approx(step), None, None, None]
        metrics = record["metrics"]
        assert (metrics["turns"], metrics["tool_calls"], metrics["tool_errors"]) == (4, 3, 2)
        assert metrics["errors_by_kind"] == {"invalid_arguments": 2}
        assert record["reward"] == pytest.approx(step)
        assert record["reward_components"] == pytest.approx(
            {"exact": 0.0, "closeness": 1 - abs(50 - target(seed)) / 100})
        assert record["stop_reason"] == "final_answer"
        observed = [m["content"] for m in record["messages"] if m["role"] == "tool"]
        assert len(observed) == 3
        assert json.loads(observed[0]) == {"hint": "lower" if target(seed) < 50 else "higher",
                                     "guesses": 1}


@pytest.mark.parametrize(("rule", "expected"), [("sum", None), ("last", 1.0)])
async def test_rewards_rubric_and_done(guess_command: list[str], rule: str,
                                       expected: float | None) -> None:
    """Two guesses, the second right: per-turn rewards are the steps', the episode ends
    on the server's ``done``, the reward follows ``reward=``, and the components are the
    rubric's scores of the last step."""
    env = envhub.make("openenv", command=guess_command, tasks=str(GUESS_TASKS), reward=rule)
    async with env.open("guess-1") as session:
        first = await call_tool(session, "step", number=90)
        assert not first.done
        assert first.turn_reward == pytest.approx(0.2 * (1 - (90 - target(1)) / 100))
        right = await call_tool(session, "step", number=target(1))
        assert right.done and right.turn_reward == pytest.approx(1.0)
        result = await session.close()
    assert result.stop_reason == "env:done"
    total = first.turn_reward + 1.0
    assert result.reward == pytest.approx(expected if expected is not None else total)
    assert result.components == {"exact": 1.0, "closeness": 1.0}


async def test_malformed_calls_are_error_observations(
    guess_command: list[str], adder_command: list[str]
) -> None:
    """Checked before they are sent (schema), refused by the server (its Action model),
    raised in the environment, failed in an MCP tool: each is an error observation, the
    session goes on, and only the steps the server ran count."""
    env = envhub.make("openenv", command=guess_command, tasks=str(GUESS_TASKS))
    async with env.open("guess-2") as session:
        bad = [(await call_tool(session, "step", **args)).observations[0] for args in (
            {"number": "seven"}, {"number": 7, "extra": 1}, {},
            {"number": 7, "note": "raise"},
        )]  # fmt: skip
        unknown = (await call_tool(session, "guess", number=7)).observations[0]
        assert all(o.is_error for o in [*bad, unknown])
        assert "is not of type 'integer'" in bad[0].content
        assert "Additional properties are not allowed" in bad[1].content
        assert "'number' is a required property" in bad[2].content
        assert "the environment raised on purpose" in bad[3].content
        assert "unknown tool 'guess'" in unknown.content
        right = await call_tool(session, "step", number=target(2))
        assert json.loads(right.observations[0].content) == {"hint": "correct", "guesses": 1}
        result = await session.close()
    assert result.reward == pytest.approx(1.0)
    assert result.metrics.tool_errors == 5

    env = envhub.make("openenv", command=adder_command, tasks=str(ADDER_TASKS))
    async with env.open("add-1") as session:
        failed = (await call_tool(session, "fail", reason="because")).observations[0]
        typed = (await call_tool(session, "add", a="x", b=2)).observations[0]
        assert failed.is_error and "failed on purpose: because" in failed.content
        assert typed.is_error and "invalid arguments for add" in typed.content
        assert (await call_tool(session, "add", a=40, b=2)).observations[0].content == "42"
        await call_tool(session, "submit", answer="42")
        result = await session.close()
    assert result.reward == 1.0 and result.metrics.tool_errors == 2


async def test_a_step_past_the_tool_timeout_does_not_shift_later_replies(
    guess_command: list[str],
) -> None:
    """OpenEnv's frames carry no request id: the reply of a step the tool timeout gave up
    on arrives later and is dropped, so the next call reads its own reply. The next call
    here is made at once: it waits for the late reply (the slow step takes 2 s), then
    for its own, under its own timeout."""
    env = envhub.make("openenv", command=guess_command, tasks=str(GUESS_TASKS),
                      tool_timeout_s=1.5)
    async with env.open("guess-3") as session:
        slow = (await call_tool(session, "step", number=1, note="slow")).observations[0]
        assert slow.is_error and "timed out" in slow.content
        right = await call_tool(session, "step", number=target(3))
        assert json.loads(right.observations[0].content) == {"hint": "correct", "guesses": 2}
        assert right.done
        result = await session.close()
    # the late step ran: its reward counts
    assert result.reward == pytest.approx(0.2 * (1 - abs(1 - target(3)) / 100) + 1.0)
