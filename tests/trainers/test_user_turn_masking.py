"""User turns in the trainer adapters: their tokens are never trained on, with recorded
ids (GRPO batch, verl, TRL rollout samples) and with ids rebuilt by a chat template, where
a changed tool list starts a new row; SkyRL gets user turns as observation messages."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import envhub
from envhub.trainers.grpo import build_batch
from envhub.trainers.token_rows import trajectory_rows
from envhub.trainers.trl_rollout import trl_sample
from envhub.trainers.verl import agent_loop_output
from envhub.trajectory import Trajectory
from tests.core.user_turn_envs import CONVERSATION, LATE_TOOL, QUESTIONS, ScriptedUserEnv
from tests.rollout.scripted_server import ScriptConfig, ScriptedServer
from tests.trainers.factories import trajectory, turn

USER = [30, 31, 32]  # a user turn's tokens, between the two completions


def with_user_turn() -> Trajectory:
    """prompt [1 2 3] -> sampled [10 11] (a final answer) -> user turn -> sampled [12 13]."""
    first = turn([1, 2, 3], [10, 11])
    second = turn([1, 2, 3, 10, 11, *USER], [12, 13], version=1, prefix_ok=True)
    return trajectory("g", 0, 1.0, [first, second])


def test_recorded_user_turn_tokens_get_no_loss() -> None:
    batch = build_batch([with_user_turn()], drop_zero_variance=False, return_tensors=None)
    assert batch.input_ids == [[1, 2, 3, 10, 11, *USER, 12, 13]]
    assert batch.loss_mask == [[0, 0, 0, 1, 1, 0, 0, 0, 1, 1]]
    verl = agent_loop_output(with_user_turn())
    assert verl["response_ids"] == [10, 11, *USER, 12, 13]
    assert verl["response_mask"] == [1, 1, 0, 0, 0, 1, 1]
    [row] = trajectory_rows(with_user_turn())
    sample = trl_sample(row, eos_token_id=0)
    assert sample["completion_ids"] == verl["response_ids"]
    assert sample["env_mask"] == verl["response_mask"]


def test_a_tool_change_that_re_renders_the_prompt_splits_recorded_rows() -> None:
    """A template that lists the tools at the top re-renders the prompt when they change:
    the turn's prompt no longer extends the last one, and each run is its own row."""
    first = turn([1, 2, 3], [10, 11])
    changed = turn([1, 2, 4, 10, 11, *USER], [12, 13], version=1, prefix_ok=False)
    rows = trajectory_rows(trajectory("g", 0, 1.0, [first, changed]))
    assert [(r.input_ids, r.loss_mask) for r in rows] == [
        ([1, 2, 3, 10, 11], [0, 0, 0, 1, 1]),
        ([1, 2, 4, 10, 11, *USER, 12, 13], [0] * 8 + [1, 1]),
    ]


def _rolled_out_without_ids() -> Trajectory:
    """The scripted-user conversation played by a model server that returns no token ids."""
    script = [
        {"tool_calls": [{"name": c["name"], "arguments": c["arguments"]} for c in calls]}
        if calls
        else {"content": content}
        for calls, content in CONVERSATION
    ]
    from tests.rollout.helpers import openai_policy

    async def roll_out() -> Trajectory:
        with ScriptedServer(ScriptConfig(turns=script)) as server:
            policy = openai_policy(server.base_url)
            try:
                result = await envhub.rollout.run(envhub.make(ScriptedUserEnv), policy, ["chat-0"])
            finally:
                await policy.aclose()
        assert result.trajectories is not None
        [trajectory] = result.trajectories
        return trajectory

    return asyncio.run(roll_out())


def test_retokenized_rows_train_only_assistant_spans_and_follow_the_tools(tokenizer: Any) -> None:
    trajectory = _rolled_out_without_ids()
    assert trajectory.reward == 1.0 and trajectory.turns[0].completion_token_ids is None
    rows = trajectory_rows(trajectory, tokenizer=tokenizer)
    # turns 0-4 saw the start's tools, turns 5-6 the set with the late tool: two rows
    assert [(r.segment, r.retokenized, r.mask_reason) for r in rows] == [
        (0, True, None),
        (1, True, None),
    ]
    late_description = "Multiply two integers."
    for row, turns in zip(rows, (5, 2), strict=True):
        spans = _spans(row.loss_mask)
        assert len(spans) == turns  # one trained span per assistant message of the row
        for start, end in spans:
            trained = tokenizer.decode(row.input_ids[start:end])
            assert not any(question in trained for question in QUESTIONS)
        untrained = tokenizer.decode([t for t, m in zip(row.input_ids, row.loss_mask,
                                                        strict=True) if not m])
        asked = QUESTIONS[:2] if row.segment == 0 else QUESTIONS
        assert all(question in untrained for question in asked)
        assert (late_description in untrained) == (row.segment == 1)
    batch = build_batch([trajectory], tokenizer=tokenizer, drop_zero_variance=False,
                        return_tensors=None)
    assert len(batch.rows) == 2 and batch.row_advantages[0] == batch.row_advantages[1]


def _spans(mask: list[int]) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for index, bit in enumerate(mask):
        if bit and (not spans or spans[-1][1] != index):
            spans.append((index, index + 1))
        elif bit:
            spans[-1] = (spans[-1][0], index + 1)
    return spans


def test_skyrl_steps_return_user_turns_as_observations() -> None:
    skyrl_gym = pytest.importorskip("skyrl_gym")
    from envhub.trainers.skyrl import SKYRL_ENV_ID, close_environments, register

    register()
    env = skyrl_gym.make(
        SKYRL_ENV_ID, env_config={"env": ScriptedUserEnv}, extras={"task_id": "chat-0"}
    )
    try:
        messages, _ = env.init()
        assert messages == [{"role": "user", "content": QUESTIONS[0]}]
        first = env.step("5")
        assert not first["done"]
        assert first["observations"] == [{"role": "user", "content": QUESTIONS[1]}]
        assert "tools" not in first["metadata"]
        second = env.step("15")
        assert second["observations"] == [{"role": "user", "content": QUESTIONS[2]}]
        tools = sorted(t["function"]["name"] for t in second["metadata"]["tools"])
        assert tools == ["add", "answer", LATE_TOOL]
        last = env.step("60")
        assert last["done"] and last["reward"] == 1.0
    finally:
        env.close()
        close_environments()
