"""An environment ends its own episode (``Environment.end_episode``): the ``env:<reason>``
stop reason travels in-process, over HTTP and WebSocket, through gymnasium and the rollout,
and the episode is scored."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

import envhub
from envhub.clients.remote import RemoteEnvironment
from envhub.gym import EnvhubGymEnv
from envhub.policies import ReferencePolicy
from envhub.rollout.episode import EpisodeRunner, EpisodeSpec
from envhub.server import create_app
from envhub.testing import serve_in_thread
from envhub.types import StepResult
from tests.core.game_envs import COUNTER_GAME, COUNTER_GAME_WITH_GOLD, CounterGame


def _up(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "name": "up", "arguments": "{}"}


async def test_the_environment_ends_the_episode_in_process() -> None:
    env = envhub.make(COUNTER_GAME)
    async with env.open() as session:
        first = await session.step([_up("1"), _up("2")])
        assert not first.done and first.stop_reason is None
        last = await session.step([_up("3"), _up("4")])  # the goal is reached at call 3
        assert last.done and last.stop_reason == "env:goal_reached" and last.reward == 1.0
        assert last.observations[0].content == "count=3"
        assert last.observations[1].is_error and "not executed" in last.observations[1].content
        assert (await session.info()).stop_reason == "env:goal_reached"
    closed = await session.close()
    assert closed.stop_reason == "env:goal_reached" and closed.reward == 1.0
    assert closed.metrics.tool_calls == 3


async def test_its_own_move_limit_and_final_answers() -> None:
    env = envhub.make(COUNTER_GAME, moves=2)
    async with env.open() as session:
        assert not (await session.step([], content="thinking")).done
        result = await session.step([], content="still thinking")
        assert result.done and result.stop_reason == "env:out_of_moves" and result.reward == 0.0


class _Talkative(CounterGame):
    final_answer_ends_episode = True


async def test_the_environments_reason_wins_over_final_answer() -> None:
    env = envhub.make(_Talkative)
    async with env.open() as session:
        result = await session.step([], content="I give up")
        assert result.done and result.stop_reason == "env:resigned"
    async with env.open() as session:
        result = await session.step([], content="42")
        assert result.done and result.stop_reason == "final_answer"


async def test_a_malformed_reason_is_the_environments_bug_not_an_end() -> None:
    env = envhub.make(COUNTER_GAME)
    async with env.open() as session:
        call = {"id": "x", "name": "end_with", "arguments": {"reason": "game over!"}}
        result = await session.step([call])
        assert not result.done and result.observations[0].is_error
        assert "stop reason must be" in result.observations[0].content
    with pytest.raises(ValidationError):
        StepResult(observations=[], stop_reason="goal_reached")  # only envhub's own or env:*
    assert StepResult(observations=[], stop_reason="env:goal_reached").stop_reason


@pytest.mark.parametrize("transport", ["http", "ws"])
async def test_the_reason_travels_over_http_and_websocket(transport: str) -> None:
    with serve_in_thread(create_app([COUNTER_GAME])) as url:
        async with RemoteEnvironment(url, "counter-game", transport=transport) as remote:
            session = await remote.open()
            assert session.task_id == "default"
            for call_id in "12":
                assert not (await session.step([_up(call_id)])).done
            result = await session.step([_up("3"), _up("4")])
            assert result.done and result.stop_reason == "env:goal_reached"
            assert result.reward == 1.0 and result.observations[1].is_error
            assert session.stop_reason == "env:goal_reached"
            closed = await session.close()
            assert closed.stop_reason == "env:goal_reached" and closed.reward == 1.0


def test_gymnasium_reports_it_as_terminated() -> None:
    env = EnvhubGymEnv(COUNTER_GAME)
    obs, info = env.reset(seed=0)
    assert info["task_id"] == "default" and json.loads(obs)[0]["content"].startswith("Count")
    action = json.dumps({"tool_calls": [_up("1")]})
    for _ in range(2):
        assert env.step(action)[1:4] == (0.0, False, False)
    _, reward, terminated, truncated, info = env.step(action)
    assert reward == 1.0 and terminated and not truncated
    assert info["stop_reason"] == "env:goal_reached"
    env.close()


async def test_a_rollout_ends_and_scores_the_episode() -> None:
    env = envhub.make(COUNTER_GAME_WITH_GOLD)
    runner = EpisodeRunner(env, ReferencePolicy())
    trajectory = await runner.run(EpisodeSpec(task_id="reach-3", group_id="g", sample_index=0))
    assert not trajectory.masked and trajectory.reward == 1.0
    assert trajectory.stop_reason == "env:goal_reached"
    assert trajectory.metrics.turns == 3  # the fourth gold call was never asked for
