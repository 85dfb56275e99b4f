"""Session semantics: budgets, error observations, truncation, idempotency."""

import asyncio
import json

import pytest

import envhub
from envhub.errors import InvalidRequest, SandboxError, SessionClosed, TaskNotFound
from tests.core.toy_envs import ToyEnv


def call(name: str, args: object, id: str = "c1") -> dict:
    return {
        "id": id,
        "name": name,
        "arguments": args if isinstance(args, str) else json.dumps(args),
    }


@pytest.fixture
def env() -> envhub.LocalEnvironment:
    return envhub.make(ToyEnv)


async def test_happy_path_and_reward(env: envhub.LocalEnvironment) -> None:
    session = await env.open("toy-3")
    assert session.task.id == "toy-3"
    result = await session.step([call("add", {"a": 2, "b": 3})])
    assert result.observations[0].content == "5" and not result.done
    result = await session.step([call("finish", {"text": "3"})])
    assert result.done and result.stop_reason == "terminal_tool" and result.reward == 1.0
    closed = await session.close()
    assert closed.reward == 1.0 and closed.components == {"correct": 1.0}
    assert closed.metrics.turns == 2 and closed.metrics.tool_calls == 2
    assert await session.close() == closed  # idempotent


@pytest.mark.parametrize(
    ("raw", "kind", "fragment"),
    [
        (call("add", "{not json"), "invalid_arguments", "not valid JSON"),
        (call("add", '{"a": "1'), "invalid_arguments", "(Unterminated string starting at position"),
        (call("add", '{"a": "\x01"}'), "invalid_arguments", "control character at position"),
        (call("add", "[1, 2]"), "invalid_arguments", "must be a JSON object"),
        (call("add", {"a": "x"}), "invalid_arguments", "as an integer"),  # cut to 100 chars
        (call("nope", {}), "unknown_tool", "available tools: add"),
        (call("boom", {}), "exception", "RuntimeError: kaboom"),
        (call("nap", {"seconds": 2}), "timeout", "timed out after 1.0s"),
        (call("wait", {"seconds": 2}), "timeout", "timed out"),
    ],
)
async def test_bad_calls_become_error_observations(env, raw, kind, fragment) -> None:
    session = await env.open("toy-1")
    result = await session.step([raw])
    obs = result.observations[0]
    assert obs.is_error and fragment in obs.content and obs.tool_call_id == "c1"
    assert session.metrics.errors_by_kind == {kind: 1}
    # the session keeps working after the error
    ok = await session.step([call("add", {"a": 1})])
    assert ok.observations[0].content == "2" and not ok.observations[0].is_error


async def test_output_truncated_with_marker(env) -> None:
    session = await env.open("toy-0")
    result = await session.step([call("shout", {"size": 1000})])
    content = result.observations[0].content
    assert "[truncated 900 chars]" in content and content.count("x") == 100
    assert session.metrics.truncated_outputs == 1


async def test_max_turns_budget(env) -> None:
    session = await env.open("toy-0")
    for _ in range(3):
        assert not (await session.step([call("add", {"a": 1})])).done
    last = await session.step([call("add", {"a": 1})])
    assert last.done and last.stop_reason == "max_turns" and last.reward == 0.0
    with pytest.raises(SessionClosed):
        await session.step([call("add", {"a": 1})])


async def test_budget_override_via_make() -> None:
    env = envhub.make(ToyEnv, max_turns=1)
    session = await env.open("toy-0")
    assert (await session.step([call("add", {"a": 1})])).stop_reason == "max_turns"


async def test_episode_wall_clock() -> None:
    env = envhub.make(ToyEnv, episode_timeout_s=0.2, tool_timeout_s=5)
    session = await env.open("toy-0")
    result = await session.step([call("wait", {"seconds": 1})])
    assert result.observations[0].is_error and result.done and result.stop_reason == "timeout"


async def test_final_answer_and_calls_after_terminal(env) -> None:
    session = await env.open("toy-2")
    result = await session.step([call("finish", {"text": "2"}, "a"), call("add", {"a": 1}, "b")])
    assert [o.is_error for o in result.observations] == [False, True]
    assert "already ended" in result.observations[1].content
    other = await env.open("toy-2")
    answer = await other.step([], content="the answer is 2")
    assert (
        answer.done
        and answer.stop_reason == "final_answer"
        and other.env.final_answer == "the answer is 2"
    )


async def test_request_id_replays_reply(env) -> None:
    session = await env.open("toy-0")
    first = await session.step([call("add", {"a": 1})], request_id="r1")
    again = await session.step([call("add", {"a": 100})], request_id="r1")
    assert again == first and session.metrics.turns == 1


async def test_concurrent_steps_are_serialised(env) -> None:
    session = await env.open("toy-0")
    results = await asyncio.gather(*(session.step([call("add", {"a": i})]) for i in range(3)))
    assert session.metrics.turns == 3 and {r.observations[0].content for r in results} == {
        "1",
        "2",
        "3",
    }


async def test_sandbox_errors_propagate(env) -> None:
    session = await env.open("toy-0")
    with pytest.raises(SandboxError):
        await session.step([call("sandbox_dies", {})])


async def test_options_and_unknowns(env) -> None:
    custom = envhub.make(ToyEnv, greeting="hi")
    assert custom.tasks.get("toy-1").prompt[0]["content"] == "hi 1"
    with pytest.raises(InvalidRequest, match="bad options"):
        envhub.make(ToyEnv, colour="red")
    with pytest.raises(TaskNotFound):
        await env.open("toy-99")


def test_sync_session_flavour() -> None:
    with envhub.sync_session("tests.core.toy_envs:ToyEnv", "toy-1") as s:
        start = s.reset()
        assert start.task_id == "toy-1" and {t["function"]["name"] for t in start.tools} >= {"add"}
        assert s.step([call("finish", {"text": "1"})]).done
        assert s.close().reward == 1.0


def test_seeded_task_choice_is_reproducible(env) -> None:
    assert env.new_session(seed=7).task.id == env.new_session(seed=7).task.id
    assert [t.id for t in env.tasks.shuffled("train", seed=3)] == [
        t.id for t in env.tasks.shuffled("train", seed=3)
    ]
