"""User turns through ``envhub.rollout.run``: the scripted model server plays a conversation
with the scripted-user environment (in-process and on a real server); the policy is offered
the late tool only from the turn after the user turn that added it, the trajectory records
the user messages and the tools per turn, and the GRPO batch trains only on sampled ids."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import envhub
from envhub.clients.remote import RemoteEnvironment
from envhub.server import create_app
from envhub.testing import serve_in_thread
from envhub.trainers.grpo import build_batch
from envhub.trajectory import Trajectory, export_trajectories, read_trajectories
from tests.core.user_turn_envs import CONVERSATION, ENV_ID, LATE_TOOL, QUESTIONS, ScriptedUserEnv
from tests.rollout.helpers import openai_policy
from tests.rollout.scripted_server import ScriptConfig, ScriptedServer, tokenize

SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [{"name": c["name"], "arguments": c["arguments"]} for c in calls]}
    if calls
    else {"content": content}
    for calls, content in CONVERSATION
]
USER_TURN_AT = [1, 4]  # the turns whose final answer a user turn follows
TOOLS_CHANGE_AT = 5  # the first turn offered the late tool


def names(tools: list[dict[str, Any]]) -> list[str]:
    return sorted(tool["function"]["name"] for tool in tools)


async def _roll_out(
    env: envhub.EnvironmentClient, server: ScriptedServer, output: Path
) -> Trajectory:
    policy = openai_policy(server.base_url)
    try:
        result = await envhub.rollout.run(env, policy, ["chat-0"], output=output)
    finally:
        await policy.aclose()
    assert result.summary.episodes == 1
    [trajectory] = read_trajectories(output)
    return trajectory


@pytest.mark.parametrize("where", ["in_process", "server"])
async def test_rollout_with_user_turns_and_a_late_tool(
    scripted: Callable[..., ScriptedServer], tmp_path: Path, where: str
) -> None:
    server = scripted(ScriptConfig(turns=SCRIPT, token_ids=True, record_bodies=True))
    output = tmp_path / "run.jsonl"
    if where == "in_process":
        trajectory = await _roll_out(envhub.make(ScriptedUserEnv), server, output)
    else:
        with serve_in_thread(create_app([ENV_ID])) as url:
            async with RemoteEnvironment(url, "scripted-user") as remote:
                trajectory = await _roll_out(remote, server, output)

    assert not trajectory.masked and trajectory.stop_reason == "final_answer"
    assert trajectory.reward == 1.0 and len(trajectory.turns) == len(CONVERSATION)

    # the policy saw the late tool only from the turn after the user turn that added it
    offered = [names(body["tools"]) for body in server.stats.bodies]
    assert offered == [["add", "answer"]] * TOOLS_CHANGE_AT + [
        ["add", "answer", LATE_TOOL]
    ] * (len(CONVERSATION) - TOOLS_CHANGE_AT)

    # ... and the trajectory says so: the start's tools, the change on the turn that saw it
    assert names(trajectory.tools) == ["add", "answer"]
    assert [t.tools is not None for t in trajectory.turns] == [
        i == TOOLS_CHANGE_AT for i in range(len(CONVERSATION))
    ]
    assert [names(tools) for tools in trajectory.turn_tools()] == offered

    # user turns are user messages right after the final answer they follow
    messages = trajectory.messages
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    assert [messages[i]["content"] for i in users] == list(QUESTIONS)
    for turn_index, question in zip(USER_TURN_AT, QUESTIONS[1:], strict=True):
        answered = trajectory.turns[turn_index].message_index
        assert messages[answered + 1] == {"role": "user", "content": question}

    _check_batch_masks_only_sampled_ids(trajectory)

    exported = tmp_path / "run.parquet"
    assert export_trajectories(output, exported, "parquet") == 1
    import datasets

    [row] = datasets.load_dataset("parquet", data_files=str(exported), split="train")
    turn_tools = [t["tools"] for t in row["turns"]]
    assert [t is not None for t in turn_tools] == [
        i == TOOLS_CHANGE_AT for i in range(len(CONVERSATION))
    ]
    assert names(json.loads(turn_tools[TOOLS_CHANGE_AT])) == ["add", "answer", LATE_TOOL]


def _check_batch_masks_only_sampled_ids(trajectory: Trajectory) -> None:
    """The batch row's loss mask is 1 exactly on the completion ids of the turns: the user
    turns' tokens (inside later prompts) are 0."""
    assert all(turn.prefix_ok in (None, True) for turn in trajectory.turns)
    batch = build_batch([trajectory], drop_zero_variance=False, return_tensors=None)
    [row] = batch.rows
    sampled = [t for turn in trajectory.turns for t in turn.completion_token_ids or []]
    assert [i for i, m in zip(row.input_ids, row.loss_mask, strict=True) if m] == sampled
    assert sum(batch.loss_mask[0]) == len(sampled)
    # each user turn's tokens sit where the scripted server's tokenizer put them, unmasked
    offset = 0
    spans = []
    for message in trajectory.messages:
        ids = tokenize(message)
        if message["role"] == "user":
            spans.append((offset, ids))
        offset += len(ids)
    assert len(spans) == len(QUESTIONS)
    for start, ids in spans:
        assert row.input_ids[start : start + len(ids)] == ids
        assert row.loss_mask[start : start + len(ids)] == [0] * len(ids)


@pytest.mark.parametrize("cap", ["runner", "session"])
async def test_max_turns_caps_model_calls_over_all_user_turns(
    scripted: Callable[..., ScriptedServer], cap: str
) -> None:
    server = scripted(ScriptConfig(turns=SCRIPT))
    policy = openai_policy(server.base_url)
    budgets = envhub.Budgets(max_turns=3 if cap == "session" else 20)
    try:
        result = await envhub.rollout.run(
            envhub.make(ScriptedUserEnv, budgets=budgets),
            policy,
            ["chat-0"],
            max_turns=3 if cap == "runner" else None,
        )
    finally:
        await policy.aclose()
    assert result.trajectories is not None
    [trajectory] = result.trajectories
    assert trajectory.stop_reason == "max_turns" and len(trajectory.turns) == 3
    assert server.stats.requests == 3
    assert [m["content"] for m in trajectory.messages if m["role"] == "user"] == list(
        QUESTIONS[:2]
    )
    assert trajectory.reward == pytest.approx(1 / 3)


def test_trajectories_written_before_turn_tools_still_load() -> None:
    """A record without ``turns[].tools`` (schema_version 1 as first written) validates,
    and its tools are the trajectory's at every turn."""
    old = {
        "schema_version": 1, "trajectory_id": "t", "group_id": "g", "task_id": "x",
        "sample_index": 0, "env": {"name": "calc", "version": "0.1.0"}, "model": "m",
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "5"}],
        "tools": [{"type": "function", "function": {"name": "add"}}],
        "turns": [{"message_index": 1, "latency_s": 0.1, "prefix_ok": None}],
        "reward": 1.0,
    }
    trajectory = Trajectory.model_validate(old)
    assert trajectory.turns[0].tools is None
    assert trajectory.turn_tools() == [old["tools"]]
