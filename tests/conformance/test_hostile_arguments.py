"""Tool calls a hostile model writes are the model's outcome on every transport (issue 29,
item 5): arguments nested 1,000 deep, integer literals too long to read, JSON escapes
that decode to unpaired surrogates. Each is an error observation (a value that is legal, a
normal one), the session keeps working, and an episode of them is scored, never masked:
in-process, over HTTP and over WebSocket against a real server, and through the
gymnasium adapter. A client body that is not JSON envhub can read is a typed error, and
the connection keeps serving."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

import aiohttp
import gymnasium
import httpx
import pytest

import envhub
from envhub import Environment, Task, TaskSet, tool
from envhub.clients.remote import RemoteEnvironment
from envhub.policies.reference import ReferencePolicy
from envhub.protocol import EnvironmentClient
from envhub.rollout.episode import EpisodeRunner, EpisodeSpec
from envhub.server import create_app
from envhub.task import GoldCall
from envhub.testing import replay_calls, serve_in_thread
from envhub.testing.conformance import _nested_arguments
from envhub.testing.hostile import deeply_nested_json
from envhub.tokens.tool_call_parsers import parse_hermes, parse_llama3_json
from envhub.trainers.token_rows import template_message
from envhub.trajectory import Trajectory
from envhub.types import ToolCall

TRANSPORTS = ("local", "http", "ws")
Transport = Literal["local", "http", "ws"]

ECHO = f"{__name__}:EchoEnv"


class EchoEnv(Environment):
    """Tools that give back what they were given: bytes as a program prints them, a
    number as the tool received it."""

    name = "echo"
    version = "0.0.1"

    def load_tasks(self) -> TaskSet:
        return TaskSet([Task(id="echo-0", prompt=[{"role": "user", "content": "echo"}])])

    @tool
    def number(self, value: int) -> str:
        """Write the number in decimal.

        Args:
            value: The number.
        """
        return str(value)

    @tool
    def run(self, hex_bytes: str) -> str:
        """Print the bytes, decoded as many environments decode a program's output
        (``surrogateescape`` keeps bytes that are not UTF-8 as lone surrogates).

        Args:
            hex_bytes: The bytes, in hexadecimal.
        """
        return "printed " + bytes.fromhex(hex_bytes).decode("utf-8", "surrogateescape")

    def reward(self) -> float:
        return 0.0


class HookCrashEnv(EchoEnv):
    """An environment whose assistant-message hook crashes on one message."""

    name = "hook-crash"

    async def on_assistant_message(self, tool_calls: list[ToolCall], content: str | None) -> None:
        if content == "crash the hook":
            raise RuntimeError("the hook crashed")


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    apps = {
        "calc": envhub.make("calc"),
        "echo": envhub.make(ECHO),
        "hook-crash": envhub.make(f"{__name__}:HookCrashEnv"),
    }
    with serve_in_thread(create_app(apps)) as url:
        yield url


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> Transport:
    chosen: Transport = request.param
    return chosen


def _client(transport: Transport, env: str, request: pytest.FixtureRequest) -> EnvironmentClient:
    if transport == "local":
        return envhub.make(ECHO if env == "echo" else env)
    url = request.getfixturevalue("server_url")
    return RemoteEnvironment(url, env, transport=transport, retries=0)


@pytest.fixture
async def calc(
    transport: Transport, request: pytest.FixtureRequest
) -> AsyncIterator[EnvironmentClient]:
    client = _client(transport, "calc", request)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def echo(
    transport: Transport, request: pytest.FixtureRequest
) -> AsyncIterator[EnvironmentClient]:
    client = _client(transport, "echo", request)
    try:
        yield client
    finally:
        await client.aclose()


_CALL_IDS = itertools.count()


def _call(name: str, arguments: str | dict[str, Any]) -> ToolCall:
    return ToolCall(id=f"call-{next(_CALL_IDS)}", name=name, arguments=arguments)


_TOO_DEEP = "arguments of calculate are nested too deeply (at most 100 levels"
_DIGITS = "arguments of calculate contain a number with more than 4300 digits"
_NOT_TEXT = "arguments of calculate contain a string that is not valid Unicode"

#: (arguments, what the error observation says) for calc's calculate(expression: str)
REFUSED: list[tuple[str | dict[str, Any], str]] = [
    (deeply_nested_json(), _TOO_DEEP),
    (_nested_arguments(1000), _TOO_DEEP),
    (_nested_arguments(101), _TOO_DEEP),
    ('{"expression": ' + "9" * 100_000 + "}", _DIGITS),
    ('{"expression": "\\ud800"}', _NOT_TEXT),
    ({"expression": "\udcff"}, _NOT_TEXT),
]


async def test_hostile_arguments_are_error_observations(calc: EnvironmentClient) -> None:
    """One step of every hostile form: one error observation each, in order, saying what
    was wrong; a legal 1e999 is calculated; the session keeps working and is scored."""
    calls = [_call("calculate", arguments) for arguments, _ in REFUSED]
    calls.append(ToolCall(id="call-name", name="calc\ud800", arguments="{}"))
    calls.append(ToolCall(id="call-inf", name="calculate", arguments='{"expression": 1e999}'))
    async with calc.open((await calc.task_ids())[0]) as session:
        result = await session.step(calls)
        assert [o.tool_call_id for o in result.observations] == [c.id for c in calls]
        *refused, unknown, infinite = result.observations
        for (arguments, reason), observation in zip(REFUSED, refused, strict=True):
            assert observation.is_error and reason in observation.content, (
                str(arguments)[:60],
                observation.content,
            )
        assert unknown.is_error and "unknown tool" in unknown.content
        assert unknown.name == "calc\ufffd"  # sent back as valid text
        assert "inf" in infinite.content  # the legal value reached the calculator
        [after] = (await session.step([_call("calculate", {"expression": "6*7"})])).observations
        assert not after.is_error and after.content == "42"
        closed = await session.close()
    assert closed.metrics.turns == 2
    assert closed.metrics.tool_errors == len(calls)
    assert closed.metrics.errors_by_kind["invalid_arguments"] == len(REFUSED)


async def _episode(client: EnvironmentClient, task_id: str, calls: list[GoldCall]) -> Trajectory:
    """``replay_calls``, with the task from the in-process environment where the client
    is remote (a server publishes no gold data)."""
    if not isinstance(client, RemoteEnvironment):
        return await replay_calls(client, task_id, calls, max_env_attempts=1)
    task = (await envhub.make(client.name).task(task_id)).model_copy(update={"gold_actions": calls})
    runner = EpisodeRunner(client, ReferencePolicy(), max_env_attempts=1, task_of=lambda _: task)
    return await runner.run(EpisodeSpec(task_id=task_id, sample_index=0, group_id="hostile"))


async def test_an_episode_of_hostile_calls_is_scored(calc: EnvironmentClient) -> None:
    """The hostile dict forms, then the task's gold answer, through the rollout engine:
    scored 1.0 in one attempt, the hostile calls counted as the model's errors."""
    task_id = (await calc.task_ids())[0]
    gold = (await envhub.make("calc").task(task_id)).gold_actions
    hostile = [GoldCall(name="calculate", arguments=a) for a, _ in REFUSED if isinstance(a, dict)]
    hostile.append(GoldCall(name="calculate", arguments={"expression": float("inf")}))
    trajectory = await _episode(calc, task_id, [*hostile, *gold])
    assert not trajectory.masked, trajectory.error
    assert trajectory.metrics.episode_attempts == 1
    assert trajectory.reward == 1.0
    assert trajectory.metrics.tool_errors == len(hostile)


async def test_a_final_answer_that_is_not_valid_text_is_scored(calc: EnvironmentClient) -> None:
    async with calc.open((await calc.task_ids())[0]) as session:
        result = await session.step([], content="\ud800 42")
        assert result.done and result.reward == 0.0
        assert (await session.close()).reward == 0.0


async def test_tool_output_that_is_not_valid_text_is_sent_as_valid_text(
    echo: EnvironmentClient,
) -> None:
    """Output bytes that are not UTF-8 (which the model can make a program print) reach
    the client with U+FFFD in their place, not as a failed answer; the session goes on."""
    async with echo.open("echo-0") as session:
        [observation] = (await session.step([_call("run", {"hex_bytes": "41ff42"})])).observations
        [after] = (await session.step([_call("number", {"value": 7})])).observations
    assert not observation.is_error and after.content == "7"
    assert observation.content == "printed A\ufffdB"


def _deep_hermes(depth: int) -> str:
    return (
        '<tool_call>{"name": "calculate", "arguments": '
        + deeply_nested_json(depth)
        + "}</tool_call>"
    )


@pytest.mark.parametrize(
    "text",
    [
        _deep_hermes(1000),
        '<tool_call>{"name": "calculate", "arguments": {"expression": ' + "9" * 5000 + "}}"
        "</tool_call>",
        '{"name": "calculate", "parameters": ' + deeply_nested_json() + "}",
        '{"name": "calculate", "parameters": {"expression": ' + "9" * 5000 + "}}",
    ],
    ids=["hermes-deep", "hermes-digits", "llama3-deep", "llama3-digits"],
)
async def test_raw_completions_with_hostile_calls_become_error_observations(text: str) -> None:
    """A token-in/token-out completion is parsed into one call to calculate, which the
    session answers with an error observation."""
    parser = parse_hermes if text.startswith("<tool_call>") else parse_llama3_json
    parsed = parser(text)
    assert [c.name for c in parsed.tool_calls] == ["calculate"]
    env = envhub.make("calc")
    async with env.open((await env.task_ids())[0]) as session:
        [observation] = (await session.step(parsed.tool_calls)).observations
    assert observation.is_error
    assert "nested too deeply" in observation.content or "4300 digits" in observation.content


async def test_big_integers_in_arguments_keep_every_digit(echo: EnvironmentClient) -> None:
    """An integer of 30 and one of 4,300 digits (Python's limit) reach the tool as those
    integers on every transport, in dict and in text arguments (a door that read them as
    floats would hand the tool another number)."""
    numbers = [123456789012345678901234567890, int("7" * 4300)]
    calls = [_call("number", {"value": n}) for n in numbers]
    calls += [_call("number", f'{{"value": {n}}}') for n in numbers]
    async with echo.open("echo-0") as session:
        observations = (await session.step(calls)).observations
    assert [o.content for o in observations] == [str(n) for n in numbers] * 2


#: client bodies envhub cannot read (a step's tool_calls, a create's options)
BAD_BODIES = {
    "nested past every parser": b'{"tool_calls": [{"name": "calculate", "arguments": '
    + deeply_nested_json(1100).encode()
    + b"}]}",
    "bytes that are not UTF-8": b'{"tool_calls": [{"name": "calc\xff", "arguments": "{}"}]}',
    "an integer too long to read": b'{"tool_calls": [{"name": "calculate", "arguments": '
    b'{"expression": ' + b"9" * 100_000 + b"}}]}",
}


@pytest.mark.parametrize("body", list(BAD_BODIES), ids=list(BAD_BODIES))
def test_unreadable_http_bodies_are_typed_client_errors(server_url: str, body: str) -> None:
    with httpx.Client(base_url=server_url, timeout=60) as http:
        session_id = http.post("/v1/sessions", json={"env": "calc"}).json()["session_id"]
        step = f"/v1/sessions/{session_id}/step"
        answer = http.post(
            step, content=BAD_BODIES[body], headers={"content-type": "application/json"}
        )
        assert answer.status_code in (400, 422), answer.text
        assert answer.json()["error"]["code"] == "invalid_request"
        good = {
            "tool_calls": [{"id": "a", "name": "calculate", "arguments": '{"expression": "2+2"}'}]
        }
        again = http.post(step, json=good)  # the same connection, the same session
        assert again.status_code == 200 and again.json()["observations"][0]["content"] == "4"


async def test_unreadable_websocket_messages_are_typed_errors(server_url: str) -> None:
    async with aiohttp.ClientSession() as http, http.ws_connect(f"{server_url}/v1/ws") as ws:
        await ws.send_str(json.dumps({"op": "create", "env": "calc"}))
        session_id = json.loads((await ws.receive()).data)["session_id"]
        head = b'{"op": "step", "session_id": "' + session_id.encode() + b'", '
        for name, body in BAD_BODIES.items():
            await ws.send_bytes(head + body[1:])
            reply = json.loads((await ws.receive()).data)
            assert reply["error"]["code"] == "invalid_request", (name, reply)
            assert reply["status"] in (400, 422), (name, reply)
        await ws.send_str(json.dumps({"op": "info", "session_id": session_id}))
        assert json.loads((await ws.receive()).data)["metrics"]["turns"] == 0


def test_a_crash_is_a_typed_answer_and_the_connection_keeps_serving(server_url: str) -> None:
    """The session fast path answers a crash as the routes do (a 500 with the error body),
    and the same keep-alive connection serves the next request."""
    with httpx.Client(base_url=server_url, timeout=60) as http:
        session_id = http.post("/v1/sessions", json={"env": "hook-crash"}).json()["session_id"]
        step = f"/v1/sessions/{session_id}/step"
        crashed = http.post(step, json={"tool_calls": [], "content": "crash the hook"})
        assert crashed.status_code == 500, crashed.text
        assert crashed.json()["error"]["code"] == "internal"
        number = {"tool_calls": [{"id": "a", "name": "number", "arguments": {"value": 5}}]}
        again = http.post(step, json=number)
        assert again.status_code == 200 and again.json()["observations"][0]["content"] == "5"


@pytest.mark.parametrize(
    "arguments", [deeply_nested_json(), '{"n": ' + "9" * 5000 + "}"], ids=["deep", "digits"]
)
def test_chat_templates_get_hostile_arguments_as_the_text_the_model_wrote(arguments: str) -> None:
    """Retokenizing a trajectory (trainers) reads each call's arguments back as an object;
    arguments no parser can take stay the model's text."""
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": arguments}}
        ],
    }
    [call] = template_message(message)["tool_calls"]
    assert call["function"]["arguments"] == arguments


def _gym_action(arguments: str) -> str:
    """A gymnasium action calling calculate with ``arguments`` written as JSON (not a
    string of JSON): the whole action is what the model wrote."""
    return '{"tool_calls": [{"id": "a", "name": "calculate", "arguments": ' + arguments + "}]}"


def test_gymnasium_actions_with_hostile_arguments_are_the_models_outcome() -> None:
    """Through the gymnasium adapter: arguments 100 levels deep, an unpaired surrogate
    and a 4,300-digit number (too long for calc) are error observations (the episode
    goes on); an action nested past the JSON reader or with a number too long to read is
    not JSON envhub can read, so it is a plain-text final answer, scored 0."""
    env = gymnasium.make("envhub.gym:envhub/calc-v0").unwrapped
    env.reset(seed=0)
    for arguments in [
        json.dumps(_nested_arguments(100)),
        '{"expression": "\\ud800"}',
        '{"expression": ' + "7" * 4300 + "}",
    ]:
        observation, reward, terminated, truncated, info = env.step(_gym_action(arguments))
        assert info["is_error"] == [True] and not terminated and not truncated
        [message] = json.loads(observation)
        assert message["role"] == "tool" and message["content"].startswith("Error: ")
    for unreadable in [deeply_nested_json(1100), '{"expression": ' + "9" * 5000 + "}"]:
        env.reset(seed=0)
        _, reward, terminated, _, info = env.step(_gym_action(unreadable))
        assert terminated and info["stop_reason"] == "final_answer" and reward == 0.0
    env.close()
