"""A third-party :class:`envhub.rollout.TurnLoop` drives episodes through
``envhub.rollout.run``: the runner keeps the session, retries, masking and the
trajectory's shared fields, the loop plays the turns."""

from __future__ import annotations

import pytest

import envhub
from envhub.errors import InvalidRequest
from envhub.policies import NoopPolicy, ReferencePolicy
from envhub.policies.base import Completion, Policy
from envhub.protocol import SessionHandle
from envhub.rollout import EpisodeRecord, EpisodeRunner, EpisodeSpec, ModelFailure, run
from envhub.rollout.episode import record_turn
from envhub.types import ToolCall


class GoldReplay:
    """Plays each task's gold actions itself, one turn each, and never calls the model:
    it drives only a policy that makes no calls (:class:`NoopPolicy`, which alone would
    score 0). ``fail`` makes every attempt fail: ``"model"`` as a model error, ``"env"``
    as an environment error, after one turn."""

    def __init__(self, fail: str | None = None) -> None:
        self.fail = fail
        self.played: list[EpisodeSpec] = []

    def check(self, policy: Policy) -> None:
        if not isinstance(policy, NoopPolicy):
            raise InvalidRequest("the gold replay makes no model call: run it with NoopPolicy")

    async def play(
        self,
        runner: EpisodeRunner,
        spec: EpisodeSpec,
        record: EpisodeRecord,
        session: SessionHandle,
    ) -> str | None:
        self.played.append(spec)
        task = await runner.task(spec.task_id)
        assert task is not None  # in-process: the runner hands the loop whole tasks
        for turn, gold in enumerate(task.gold_actions):
            call = ToolCall(id=f"gold-{turn}", name=gold.name, arguments=gold.arguments)
            completion = Completion(content=None, tool_calls=[call], finish_reason="tool_calls")
            record_turn(record, completion, None, message_index=len(record.messages),
                        latency_s=0.0, policy_version=runner.policy_version())  # fmt: skip
            record.messages.append(completion.to_message())
            if self.fail == "model":
                raise ModelFailure("the scripted model broke")
            if self.fail == "env":
                raise RuntimeError("the scripted sandbox broke")
            result = await session.step([call], request_id=f"{record.trajectory_id}-t{turn}")
            record.messages.extend(o.to_message() for o in result.observations)
            if result.done:
                return None
        return "max_turns"


async def test_a_turn_loop_of_its_own_plays_the_episodes() -> None:
    loop = GoldReplay()
    result = await run(envhub.make("calc"), NoopPolicy(), "0:3", group_size=2,
                       policy_version=7, turn_loop=loop)  # fmt: skip
    assert sorted((s.task_id, s.sample_index) for s in loop.played) == [
        (f"calc-0-{i:05d}", s) for i in (4, 9, 14) for s in range(2)
    ]
    assert result.trajectories is not None and len(result.trajectories) == 6
    assert result.summary.mean_reward == 1.0  # NoopPolicy's own loop scores 0
    for trajectory in result.trajectories:
        assert not trajectory.masked and trajectory.stop_reason == "terminal_tool"
        assert trajectory.model == "noop"
        assert trajectory.turns and {t.policy_version for t in trajectory.turns} == {7}
        assert len(trajectory.turns) == trajectory.metrics.tool_calls
        assert trajectory.messages[trajectory.turns[0].message_index]["tool_calls"]


async def test_the_loop_refuses_a_policy_before_any_episode_runs() -> None:
    loop = GoldReplay()
    with pytest.raises(InvalidRequest, match="NoopPolicy"):
        await run(envhub.make("calc"), ReferencePolicy(), "0:2", turn_loop=loop)
    assert loop.played == []


@pytest.mark.parametrize(
    ("fail", "stop_reason", "kind", "attempts"),
    [("model", "model_error", "internal", 1), ("env", "env_error", "RuntimeError", 2)],
)
async def test_the_runner_masks_what_the_loop_raises(
    fail: str, stop_reason: str, kind: str, attempts: int
) -> None:
    """A model failure ends the episode at once; anything else is retried on a fresh
    session first. Either way the episode is masked, with the turns the last attempt
    recorded."""
    loop = GoldReplay(fail=fail)
    result = await run(envhub.make("calc"), NoopPolicy(), "0:1", turn_loop=loop,
                       max_env_attempts=2, max_masked_fraction=None)  # fmt: skip
    assert result.trajectories is not None
    (trajectory,) = result.trajectories
    assert trajectory.masked and trajectory.reward is None
    assert trajectory.stop_reason == stop_reason
    assert trajectory.error is not None and trajectory.error.kind == kind
    assert "scripted" in trajectory.error.message
    assert trajectory.metrics.episode_attempts == attempts == len(loop.played)
    assert len(trajectory.turns) == 1
