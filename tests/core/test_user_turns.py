"""User turns in the session: a final answer or a terminal tool answered with the next user
message continues the episode, the tool set may change with it, and ``max_turns`` counts
assistant turns over the whole episode."""

from __future__ import annotations

import json
from typing import Any

import pytest

import envhub
from envhub import Budgets, UserTurn
from envhub.errors import EnvironmentFailure
from tests.core.toy_envs import ToyEnv
from tests.core.user_turn_envs import (
    CONVERSATION,
    ENV_ID,
    QUESTIONS,
    BrokenUserEnv,
    LeavingUserEnv,
    ScriptedUserEnv,
    WrongTypeUserEnv,
    check_played,
    play,
)


def call(name: str, id: str = "c1", **arguments: Any) -> dict[str, Any]:
    return {"id": id, "name": name, "arguments": json.dumps(arguments)}


def tool_names(schemas: list[dict[str, Any]] | None) -> list[str]:
    assert schemas is not None
    return sorted(s["function"]["name"] for s in schemas)


async def test_final_answers_continue_with_user_turns_and_a_late_tool() -> None:
    async with await envhub.make(ScriptedUserEnv).open("chat-0") as session:
        start = await session.reset()
        assert tool_names(start.tools) == ["add", "answer"]
        assert (await session.step([call("add", a=2, b=3)])).observations[0].content == "5"

        first = await session.step([], content="5")
        assert not first.done and first.stop_reason is None and first.observations == []
        assert first.user_messages == [{"role": "user", "content": QUESTIONS[1]}]
        assert first.tools is None  # unchanged

        early = await session.step([call("multiply", a=15, b=4)])
        assert early.observations[0].is_error
        assert "unknown tool 'multiply'" in early.observations[0].content

        second = await session.step([], content="15")
        assert second.user_messages == [{"role": "user", "content": QUESTIONS[2]}]
        assert tool_names(second.tools) == ["add", "answer", "multiply"]

        late = await session.step([call("multiply", a=15, b=4)])
        assert late.observations[0].content == "60" and not late.observations[0].is_error

        last = await session.step([], content="60")
        assert last.done and last.stop_reason == "final_answer" and last.user_messages == []
        assert last.reward == 1.0
        closed = await session.close()
    assert closed.metrics.turns == 6 and closed.metrics.errors_by_kind == {"unknown_tool": 1}


async def test_the_scripted_conversation_in_process() -> None:
    async with await envhub.make(ScriptedUserEnv).open("chat-0") as session:
        check_played(await play(session))


async def test_a_terminal_tool_is_answered_with_a_user_turn_too() -> None:
    session = await envhub.make(ScriptedUserEnv).open("chat-0")
    result = await session.step([call("answer", value="5"), call("add", id="c2", a=1, b=1)])
    assert result.observations[0].content == "recorded"
    assert result.observations[1].is_error and "not executed" in result.observations[1].content
    assert not result.done and result.user_messages[0]["content"] == QUESTIONS[1]
    await session.step([call("answer", value="14")])
    result = await session.step([call("answer", value="60")])
    assert result.done and result.stop_reason == "terminal_tool"
    closed = await session.close()
    assert closed.reward == pytest.approx(2 / 3)
    assert closed.info["answers"] == ["5", "14", "60"]


@pytest.mark.parametrize(
    ("max_turns", "steps", "stop_reason", "answers"),
    [
        # the budget is spent on the turn whose answer the user would follow up: the turn
        # is dropped and the episode ends on the budget, not as if the conversation ended
        (2, [[call("add", a=2, b=3)], []], "max_turns", 1),
        (3, [[], [], []], "final_answer", 3),  # the last answer on the last budgeted turn
        (4, [[], [call("add", a=5, b=10)], [], [call("add", a=1, b=2)]], "max_turns", 2),
    ],
)
async def test_max_turns_counts_assistant_turns_over_the_whole_episode(
    max_turns: int, steps: list[list[dict[str, Any]]], stop_reason: str, answers: int
) -> None:
    env = envhub.make(ScriptedUserEnv, budgets=Budgets(max_turns=max_turns))
    session = await env.open("chat-0")
    for index, calls in enumerate(steps):
        result = await session.step(calls, content=None if calls else "x")
        assert result.done == (index == len(steps) - 1)
    assert result.stop_reason == stop_reason and result.user_messages == []
    closed = await session.close()
    assert closed.metrics.turns == max_turns and len(closed.info["answers"]) == answers


async def test_the_environment_may_end_the_episode_instead_of_a_user_turn() -> None:
    session = await envhub.make(LeavingUserEnv).open("chat-0")
    assert not (await session.step([], content="5")).done
    result = await session.step([], content="15")
    assert result.done and result.stop_reason == "env:user_left" and result.user_messages == []


@pytest.mark.parametrize(
    ("env_class", "fragment"),
    [
        (BrokenUserEnv, "RuntimeError: the user simulator is down"),
        (WrongTypeUserEnv, "returned str, not a UserTurn"),
    ],
)
async def test_a_failing_user_is_an_environment_failure(env_class: type, fragment: str) -> None:
    session = await envhub.make(env_class).open("chat-0")
    with pytest.raises(EnvironmentFailure, match=fragment):
        await session.step([], content="5")
    await session.abort()


async def test_environments_without_the_hook_end_on_a_final_answer() -> None:
    session = await envhub.make(ToyEnv).open("toy-1")
    result = await session.step([], content="done")
    assert result.done and result.stop_reason == "final_answer" and result.user_messages == []


def test_a_user_turn_needs_a_message_and_takes_strings_or_messages() -> None:
    with pytest.raises(ValueError, match="at least one message"):
        UserTurn([])
    with pytest.raises(TypeError, match="a str or a dict"):
        UserTurn([3])  # type: ignore[list-item]
    turn = UserTurn(["hi", {"role": "system", "content": "be brief"}])
    assert turn.chat_messages() == [
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "be brief"},
    ]


def test_gymnasium_observations_show_user_turns_and_new_tools() -> None:
    from envhub.gym import EnvhubGymEnv

    env = EnvhubGymEnv(ENV_ID, render_mode="ansi")
    try:
        obs, info = env.reset(options={"task_id": "chat-0"})
        assert json.loads(obs) == [{"role": "user", "content": QUESTIONS[0]}]
        assert tool_names(info["tools"]) == ["add", "answer"]
        infos = []
        for calls, content in CONVERSATION:
            action = json.dumps({"content": content, "tool_calls": calls})
            obs, reward, terminated, truncated, info = env.step(action)
            infos.append((json.loads(obs), info))
        assert terminated and not truncated and reward == 1.0
        assert infos[1][0] == [{"role": "user", "content": QUESTIONS[1]}]
        assert "tools" not in infos[1][1]
        assert infos[4][0] == [{"role": "user", "content": QUESTIONS[2]}]
        assert tool_names(infos[4][1]["tools"]) == ["add", "answer", "multiply"]
        assert f"[user] {QUESTIONS[2]}" in (env.render() or "")
    finally:
        env.close()
