"""The configurable reward: exact, F1 and numeric match on the ``answer``, a task's own
``metadata.reward``, and an operator's ``module:function`` over the real transcript."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from envhub_mcp import Scorer

import envhub
from envhub import Reward, Task
from envhub.errors import InvalidRequest
from envhub.policies.reference import ReferencePolicy


def _task(answer: str, **metadata: str) -> Task:
    return Task(id="t", prompt=[], answer=answer, metadata=metadata)


@pytest.mark.parametrize(
    ("reward", "answer", "final", "expected"),
    [
        ("exact", "Chen Wu", "chen wu.", 1.0),
        ("exact", "Chen Wu", "Chen", 0.0),
        ("f1", "Chen Wu", "Chen", 2 / 3),
        ("f1", "Sketch atmospheric drag model", "atmospheric drag model", 6 / 7),
        ("numeric", "12.5", "12.50", 1.0),
        ("numeric", "12.5", "12", 0.0),
        ("numeric", "12.5", "twelve and a half", 0.0),
    ],
)
def test_answer_matches(reward: str, answer: str, final: str, expected: float) -> None:
    scored = Scorer(reward).score(_task(answer), [], final)
    assert scored.value == pytest.approx(expected)
    assert scored.components["answered"] == 1.0


@pytest.mark.parametrize("reward", ["exact", "f1", "numeric"])
def test_no_answer_scores_zero(reward: str) -> None:
    scored = Scorer(reward).score(_task("4"), [], None)
    assert scored.value == 0.0 and scored.components["answered"] == 0.0


def test_a_task_chooses_its_own_match() -> None:
    assert Scorer("exact").score(_task("12.5", reward="numeric"), [], "12.50").value == 1.0
    with pytest.raises(ValueError, match=r"metadata\.reward"):
        Scorer("exact").score(_task("1", reward="os:system"), [], "1")


@pytest.fixture
def reward_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "mcp_test_rewards.py").write_text(textwrap.dedent('''
        from envhub import Reward

        def converted_and_right(task, transcript, final):
            """1 only for a right answer reached through a successful convert_time call."""
            used = [c for c in transcript if c["tool"] == "convert_time" and not c["is_error"]]
            grounded = any(final and final in c["output"] for c in used)
            right = final == task.answer
            return Reward(value=float(right and grounded),
                          components={"right": float(right), "grounded": float(grounded)},
                          info={"calls": [c["arguments"] for c in transcript]})
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "mcp_test_rewards:converted_and_right"


async def test_module_function_scores_the_real_transcript(reward_module: str) -> None:
    env = envhub.make("mcp", task_set="time-zones", reward=reward_module)
    try:
        task = await env.task("time-zones-01")
        result = await envhub.rollout.run(env, ReferencePolicy(), [task.id])
        async with env.open(task.id) as session:  # answering without a call: not grounded
            await session.step([envhub.ToolCall(id="a", name="answer",
                                                arguments={"value": task.answer})])
            ungrounded = await session.close()
    finally:
        await env.aclose()
    assert result.trajectories is not None
    [trajectory] = result.trajectories
    assert trajectory.reward == 1.0
    assert trajectory.reward_components == {"right": 1.0, "grounded": 1.0}
    assert ungrounded.reward == 0.0 and ungrounded.components == {"right": 1.0, "grounded": 0.0}
    assert isinstance(Scorer(reward_module).score(task, [], None), Reward)


@pytest.mark.parametrize(
    ("reward", "message"),
    [("close", "unknown reward"), ("no_such_module_xyz:f", "cannot import"),
     ("json:no_such_function", "has no function")],
)
def test_a_bad_reward_fails_when_the_environment_is_made(reward: str, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        envhub.make("mcp", reward=reward)
