"""Hostile calculator input is the model's outcome: a readable error observation, and an
episode made of such calls is scored, never masked (a masked episode is retried and
dropped, so a policy could use it to escape a bad reward)."""

from __future__ import annotations

import pytest

import envhub
from envhub.task import GoldCall
from envhub.testing import call_tool, replay_calls

#: (expression, what the error observation says)
HOSTILE = [
    ("1e18 ** 20.0", "result out of range"),  # float power past 1e308 raises OverflowError
    ("1e-320 ** -2", "result out of range"),
    ("9" * 199, "number out of range"),
    ("1e400", "number out of range"),
    ("2 ** 64 ** 64", "out of range"),
    ("2 ** -1e10", "exponent"),
    ("(-8) ** (1 / 3)", "out of range"),  # complex
    ("7 // 0.0", "division by zero"),
    ("-" * 150 + "1 +", "not an arithmetic expression"),
    ("(" * 100 + "1" + ")" * 100, "longer than 200 characters"),
    ("__import__('os').system('id')", "unsupported syntax"),
    ("[1] * 10 ** 9", "unsupported syntax"),
    ("\x00", "not an arithmetic expression"),
    # an unpaired surrogate never reaches the tool: the session refuses it (the
    # conformance suite's hostile_arguments check, for every environment)
]


@pytest.mark.parametrize(("expression", "message"), HOSTILE)
async def test_hostile_expression_is_a_readable_error(expression: str, message: str) -> None:
    session = await envhub.make("calc").open()
    observation = (await call_tool(session, "calculate", expression=expression)).observations[0]
    assert observation.is_error
    assert message in observation.content, observation.content
    assert "CalculatorError" in observation.content
    after = (await call_tool(session, "calculate", expression="6 * 7")).observations[0]
    assert after.content == "42"
    await session.close()


async def test_an_episode_of_hostile_calls_is_scored_not_masked() -> None:
    env = envhub.make("calc")
    task_id = (await env.task_ids())[0]
    calls = [
        *(GoldCall(name="calculate", arguments={"expression": e}) for e, _ in HOSTILE[:5]),
        GoldCall(name="calculate", arguments={"expression": ["1 + 1"]}),  # wrong type
        GoldCall(name="shell", arguments={"command": "id"}),  # no such tool
        GoldCall(name="answer", arguments={"value": "nan"}),
    ]
    trajectory = await replay_calls(env, task_id, calls)
    assert not trajectory.masked, trajectory.error
    assert trajectory.metrics.episode_attempts == 1
    assert trajectory.stop_reason == "terminal_tool"
    assert trajectory.reward == 0.0
    assert trajectory.reward_components == {"correct": 0.0, "answered": 1.0}
    assert trajectory.metrics.tool_errors == len(calls) - 1
