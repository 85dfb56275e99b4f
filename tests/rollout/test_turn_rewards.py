"""Turn-level rewards end to end: an environment rewards each turn
(:class:`~tests.rollout.turn_reward_env.MarkEnv`), the scripted model server plays it, and
the rewards reach the trajectory identically in-process, over HTTP and over WebSocket (a
real uvicorn on 127.0.0.1), every server door and MCP carry them, the viewer shows them,
and the GRPO, TRL, verl and SkyRL batches put them on the right tokens.

One scripted model server and one envhub server serve the whole module; the rollouts
run once (:func:`rolled_out`) and the batch tests read their trajectories.
"""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

import envhub
from envhub.clients.remote import RemoteEnvironment
from envhub.errors import EnvironmentFailure, InvalidRequest
from envhub.server import create_app
from envhub.testing import serve_in_thread
from envhub.trainers.grpo import build_batch
from envhub.trainers.turn_rewards import turn_returns, turn_rewards
from envhub.trajectory import Trajectory, TrajectoryWriter, read_trajectories
from envhub.types import StepResult
from tests.rollout.helpers import openai_policy
from tests.rollout.scripted_server import ScriptConfig, ScriptedServer
from tests.rollout.test_cli import CLI, ROOT
from tests.rollout.turn_reward_env import ENV_ID, SCRIPT, TURN_REWARDS, MarkEnv
from tests.server.test_server_doors import DOORS, step

FINAL = 1.0
RETURNS_HALF = [0.625, 0.25, 1.0, 1.0]  # gamma 0.5, by hand: 1.0; 0.5+0.5; -0.25+0.5*1; 0.5+...
TRANSPORTS = ("in_process", "http", "ws")


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedServer]:
    with ScriptedServer(ScriptConfig(turns=list(SCRIPT), token_ids=True)) as server:
        yield server


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    with serve_in_thread(create_app([ENV_ID])) as url:
        yield url


async def _roll_out(env: envhub.EnvironmentClient, model: ScriptedServer, output: Path) -> None:
    policy = openai_policy(model.base_url)
    try:
        await envhub.rollout.run(env, policy, ["mark-0"], output=output)
    finally:
        await policy.aclose()


@pytest.fixture(scope="module")
def rolled_out(
    model: ScriptedServer, server_url: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Trajectory]:
    """The same episode through each transport, read back from its file."""
    import asyncio

    folder = tmp_path_factory.mktemp("turn-rewards")

    async def all_transports() -> None:
        await _roll_out(envhub.make(MarkEnv), model, folder / "in_process.jsonl")
        for transport in ("http", "ws"):
            async with RemoteEnvironment(server_url, "mark", transport=transport) as remote:
                await _roll_out(remote, model, folder / f"{transport}.jsonl")

    asyncio.run(all_transports())
    return {name: next(read_trajectories(folder / f"{name}.jsonl")) for name in TRANSPORTS}


def test_rewards_reach_the_trajectory_alike_on_every_transport(
    rolled_out: dict[str, Trajectory],
) -> None:
    for name, trajectory in rolled_out.items():
        assert not trajectory.masked, name
        assert [t.reward for t in trajectory.turns] == TURN_REWARDS, name
        assert trajectory.reward == FINAL and trajectory.stop_reason == "terminal_tool"
    local = rolled_out["in_process"]
    for name in ("http", "ws"):  # the whole turn alike, token ids included
        assert [t.model_dump(exclude={"latency_s", "endpoint"}) for t in rolled_out[name].turns] \
            == [t.model_dump(exclude={"latency_s", "endpoint"}) for t in local.turns], name


async def test_every_server_door_answers_the_turn_reward_and_refuses_one_from_a_client(
    server_url: str,
) -> None:
    async with httpx.AsyncClient(base_url=server_url) as http:
        for door in DOORS:
            opened = await http.post("/v1/sessions", json={"env": "mark", "task_id": "mark-0"})
            session_id = opened.json()["session_id"]
            call = {"id": "c", "name": "mark", "arguments": {"item": "b"}}
            reply = await step(door, server_url, session_id, {"tool_calls": [call]})
            assert reply.status == 200 and reply.body["turn_reward"] == 0.5, door
            again = await step(door, server_url, session_id, {"tool_calls": [call]})
            assert again.body["turn_reward"] == -0.25 and again.body["reward"] is None, door
            forged = await step(door, server_url, session_id,
                                {"tool_calls": [], "turn_reward": 100.0})
            assert forged.status == 422, door  # computed by the environment, never sent
            await http.delete(f"/v1/sessions/{session_id}")


async def test_mcp_carries_the_turn_reward_in_the_result_meta() -> None:
    from envhub.mcp.door import serve_session_mcp
    from tests.mcp.clients import http_session

    env = envhub.make(MarkEnv)
    session = await env.open("mark-0")
    async with serve_session_mcp(session, await session.reset(), env_name="mark") as url:
        async with http_session(url) as client:
            marked = await client.call_tool("mark", {"item": "a"})
            await client.call_tool("mark", {"item": "b"})
            submitted = await client.call_tool("submit", {})
    assert marked.meta == {"envhub/done": False, "envhub/turn_reward": 0.5}
    assert submitted.meta is not None and submitted.meta["envhub/turn_reward"] == 0.0
    assert submitted.meta["envhub/reward"] == FINAL
    assert "0.5" not in marked.content[0].text  # the model never reads its reward
    await session.close()


@pytest.mark.parametrize("value", [math.nan, math.inf, True, "1", 10**400])
async def test_a_turn_reward_that_is_not_a_finite_number_is_an_environment_failure(
    value: Any,
) -> None:
    session = await envhub.make(MarkEnv, turn_value=value).open("mark-0")
    await session.reset()
    with pytest.raises(EnvironmentFailure, match="a per-turn reward is a finite number"):
        await session.step([{"id": "c", "name": "mark", "arguments": {"item": "a"}}])
    await session.abort()


async def test_a_failing_turn_reward_masks_the_episode(model: ScriptedServer) -> None:
    policy = openai_policy(model.base_url)
    try:
        result = await envhub.rollout.run(
            envhub.make(MarkEnv, turn_value=math.nan), policy, ["mark-0"],
            max_env_attempts=1, max_masked_fraction=1.0,
        )
    finally:
        await policy.aclose()
    assert result.trajectories is not None
    [trajectory] = result.trajectories
    assert trajectory.masked and trajectory.reward is None
    assert trajectory.error is not None and "finite number" in trajectory.error.message


def test_a_reply_with_a_non_finite_turn_reward_fails_validation() -> None:
    with pytest.raises(ValidationError):
        StepResult.model_validate_json('{"observations": [], "turn_reward": Infinity}')
    with pytest.raises(ValidationError):
        StepResult(observations=[], turn_reward=math.nan)


def test_discounted_returns_match_the_hand_computed_ones(
    rolled_out: dict[str, Trajectory],
) -> None:
    trajectory = rolled_out["in_process"]
    assert turn_rewards(trajectory) == [0.5, -0.25, 0.5, 1.0]  # the final reward at the last
    assert turn_returns(trajectory, 0.5) == RETURNS_HALF
    assert turn_returns(trajectory, 1.0) == [1.75, 1.25, 1.5, 1.0]
    assert turn_returns(trajectory, 0.0) == [0.5, -0.25, 0.5, 1.0]
    for gamma in (1.5, -0.1, math.nan, True):
        with pytest.raises(InvalidRequest, match="gamma"):
            turn_returns(trajectory, gamma)


def _spans(trajectory: Trajectory) -> list[tuple[int, int]]:
    """(start, end) of each turn's completion ids in the episode's one token sequence."""
    spans = []
    for turn in trajectory.turns:
        assert turn.prompt_token_ids is not None and turn.completion_token_ids is not None
        start = len(turn.prompt_token_ids)
        spans.append((start, start + len(turn.completion_token_ids)))
    return spans


def _expected(trajectory: Trajectory, length: int) -> tuple[list[float], list[float]]:
    """Per token, by hand: each turn's reward on its last sampled token, its return on all
    of its sampled tokens."""
    rewards, returns = [0.0] * length, [0.0] * length
    for (start, end), reward, value in zip(
        _spans(trajectory), [0.5, -0.25, 0.5, 1.0], RETURNS_HALF, strict=True
    ):
        rewards[end - 1] = reward
        returns[start:end] = [value] * (end - start)
    return rewards, returns


def test_the_grpo_batch_puts_rewards_and_returns_on_each_turns_tokens(
    rolled_out: dict[str, Trajectory],
) -> None:
    trajectory = rolled_out["ws"]
    batch = build_batch([trajectory], drop_zero_variance=False, return_tensors=None, gamma=0.5)
    [row] = batch.rows
    last = trajectory.turns[-1]
    assert row.input_ids == (last.prompt_token_ids or []) + (last.completion_token_ids or [])
    for (start, end), turn in zip(_spans(trajectory), trajectory.turns, strict=True):
        assert row.input_ids[start:end] == turn.completion_token_ids  # the sampled ids
    rewards, returns = _expected(trajectory, len(row))
    assert batch.token_rewards == [rewards] and batch.returns == [returns]
    assert sum(rewards) == sum(turn_rewards(trajectory))
    tensors = build_batch([trajectory], drop_zero_variance=False, gamma=0.5, pad_to_multiple_of=64)
    assert tensors.token_rewards.shape == tensors.input_ids.shape
    assert tensors.token_rewards[0, : len(row)].tolist() == rewards
    assert tensors.returns[0, : len(row)].tolist() == returns
    assert build_batch([trajectory], drop_zero_variance=False).returns is None  # opt-in


def test_a_masked_episodes_turn_rewards_are_never_trained_on(
    rolled_out: dict[str, Trajectory],
) -> None:
    scored = rolled_out["in_process"]
    masked = scored.model_copy(update={"trajectory_id": "m", "masked": True, "reward": None,
                                       "stop_reason": "env_error"})  # fmt: skip
    assert [t.reward for t in masked.turns] == TURN_REWARDS  # recorded, for the viewer
    batch = build_batch([scored, masked], drop_zero_variance=False, return_tensors=None, gamma=1)
    assert batch.dropped == {"masked": 1} and [r.trajectory_id for r in batch.rows] == [
        scored.trajectory_id
    ]
    with pytest.raises(InvalidRequest, match="masked"):
        turn_returns(masked)
    from envhub.trainers.verl import agent_loop_outputs

    _, verl_masked = agent_loop_outputs([scored, masked], gamma=1.0)
    assert verl_masked["extra_fields"]["envhub_token_rewards"] is None
    assert verl_masked["reward_score"] is None


def test_trl_and_verl_samples_align_rewards_with_completion_tokens(
    rolled_out: dict[str, Trajectory],
) -> None:
    from envhub.trainers.trl_rollout import EnvhubRollout
    from envhub.trainers.verl import agent_loop_outputs

    trajectory = rolled_out["http"]
    cut = _spans(trajectory)[0][0]  # the first sampled token: where the completion starts
    last = trajectory.turns[-1]
    rewards, returns = _expected(
        trajectory, len(last.prompt_token_ids or []) + len(last.completion_token_ids or [])
    )
    rollout = EnvhubRollout(envhub.make(MarkEnv), policy=object(), gamma=0.5)
    trl = rollout.to_trl([trajectory], eos_token_id=0, gamma=rollout.gamma)
    assert trl["token_rewards"] == [rewards[cut:]] and trl["returns"] == [returns[cut:]]
    assert len(trl["completion_ids"][0]) == len(rewards) - cut
    [verl] = agent_loop_outputs([trajectory], gamma=0.5)
    assert verl["extra_fields"]["envhub_token_rewards"] == rewards[cut:]
    assert verl["extra_fields"]["envhub_returns"] == returns[cut:]
    assert verl["extra_fields"]["turn_scores"] == TURN_REWARDS  # verl's own per-turn field
    assert verl["reward_score"] == FINAL
    [cut_short] = agent_loop_outputs([trajectory], gamma=0.5, response_length=5)
    assert cut_short["extra_fields"]["envhub_returns"] == returns[cut : cut + 5]


def test_skyrl_gets_each_steps_reward_and_per_token_rewards(
    rolled_out: dict[str, Trajectory],
) -> None:
    pytest.importorskip("skyrl_gym")
    from envhub.trainers.skyrl import EnvhubSkyRLEnv, generator_output

    env = EnvhubSkyRLEnv({"env": MarkEnv}, {"task_id": "mark-0"})
    env.init()
    actions = [f'<tool_call>{{"name": "mark", "arguments": {{"item": "{item}"}}}}</tool_call>'
               for item in ("a", "a", "b")]
    actions.append('<tool_call>{"name": "submit", "arguments": {}}</tool_call>')
    steps = [env.step(action) for action in actions]
    assert [s["reward"] for s in steps] == [0.5, -0.25, 0.5, 0.0 + FINAL] and steps[-1]["done"]
    assert [s["metadata"]["turn_reward"] for s in steps] == TURN_REWARDS
    trajectory = rolled_out["in_process"]
    spans = _spans(trajectory)
    rewards, _ = _expected(trajectory, spans[-1][1])
    cut = spans[0][0]
    out = generator_output([trajectory], turn_level=True)
    assert out["rewards"] == [rewards[cut:]]


def test_the_episode_page_shows_each_turns_reward(
    rolled_out: dict[str, Trajectory], tmp_path: Path
) -> None:
    from envhub.view.app import create_app as view_app
    from envhub.view.catalog import Catalog
    from tests.rollout.scripted_server import ThreadedUvicorn

    path = tmp_path / "run.jsonl"
    with TrajectoryWriter(path) as writer:
        writer.write(rolled_out["in_process"])
    catalog = Catalog([path], tmp_path / "cache")
    with ThreadedUvicorn(view_app(catalog)) as server:
        page = httpx.get(f"{server.url}/runs/0/episodes/1").text
    catalog.close()
    for value in ("0.5", "-0.25", "0"):
        assert f'<span class="tag turn-reward">turn reward {value}</span>' in page


def test_old_lines_and_tree_suffixes_keep_their_turn_rewards(
    rolled_out: dict[str, Trajectory], tmp_path: Path
) -> None:
    root = rolled_out["in_process"].model_copy(update={"tree_id": "r", "tree_size": 2})
    root = root.model_copy(update={"trajectory_id": "r"})
    own = [t.model_copy(update={"reward": 2.0}) for t in root.turns[2:]]
    child = root.model_copy(update={
        "trajectory_id": "c", "parent_id": "r", "branch_turn": 2,
        "branch_message": root.turns[2].message_index, "turns": root.turns[:2] + own,
    })  # fmt: skip
    path = tmp_path / "tree.jsonl"
    with TrajectoryWriter(path) as writer:
        writer.write_tree([root, child])
    stored = [json.loads(line) for line in path.read_text().splitlines()]
    assert stored[1]["schema_version"] == 2
    assert [t["reward"] for t in stored[1]["turns"]] == [2.0, 2.0]  # the suffix only
    _, whole = read_trajectories(path)
    assert [t.reward for t in whole.turns] == [0.5, -0.25, 2.0, 2.0]
    old = root.model_dump(mode="json")
    for turn in old["turns"]:
        del turn["reward"]
    assert [t.reward for t in Trajectory.model_validate(old).turns] == [None] * 4


def test_envhub_rollout_records_turn_rewards(model: ScriptedServer, tmp_path: Path) -> None:
    out = tmp_path / "mark.jsonl"
    result = subprocess.run(
        [*CLI, "rollout", ENV_ID, "--model", "scripted", "--base-url", model.base_url,
         "--tasks", "mark-0,mark-1", "--output", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    trajectories = list(read_trajectories(out))
    assert len(trajectories) == 2
    for trajectory in trajectories:
        assert [t.reward for t in trajectory.turns] == TURN_REWARDS


def test_gymnasium_step_rewards_sum_to_the_undiscounted_return() -> None:
    pytest.importorskip("gymnasium")
    from envhub.gym import EnvhubGymEnv

    env = EnvhubGymEnv(envhub.make(MarkEnv))
    env.reset(options={"task_id": "mark-0"})
    rewards, infos = [], []
    for item in ("a", "a", "b"):
        action = {"tool_calls": [{"name": "mark", "arguments": {"item": item}}]}
        _, reward, _, _, info = env.step(json.dumps(action))
        rewards.append(reward)
        infos.append(info["turn_reward"])
    _, reward, terminated, _, _ = env.step(json.dumps({"tool_calls": [{"name": "submit"}]}))
    env.close()
    assert [*rewards, reward] == [0.5, -0.25, 0.5, 0.0 + FINAL] and terminated
    assert infos == [0.5, -0.25, 0.5]


COMPACTED_REWARDS = [0.5, -0.25, 0.5, -0.25, -0.25, 0.0]
"""MarkEnv compacted at turns:3 keeping 1 turn: the scripted server indexes its script by
the assistant messages it is sent, so the new segment's turns replay a, b (both repeats
now), then submit."""
COMPACTED_RETURNS = [0.484375, -0.03125, 0.4375, -0.125, 0.25, 1.0]  # gamma 0.5, by hand


@pytest.fixture(scope="module")
def compacted(model: ScriptedServer) -> Trajectory:
    """One MarkEnv episode whose context was compacted once (two segments)."""
    from envhub.rollout import CompactionConfig

    async def episode() -> Trajectory:
        policy = openai_policy(model.base_url)
        try:
            result = await envhub.rollout.run(
                envhub.make(MarkEnv), policy, ["mark-0"],
                compaction=CompactionConfig.of("turns:3", "keep-last-k", keep=1),
            )  # fmt: skip
        finally:
            await policy.aclose()
        assert result.trajectories is not None
        return result.trajectories[0]

    import asyncio

    return asyncio.run(episode())


def _segment_expected(trajectory: Trajectory, turns: range) -> tuple[list[float], list[float]]:
    """Per token of the segment of ``turns`` (its last turn's sequence), by hand."""
    last = trajectory.turns[turns[-1]]
    length = len(last.prompt_token_ids or []) + len(last.completion_token_ids or [])
    rewards, returns = [0.0] * length, [0.0] * length
    finals = [*COMPACTED_REWARDS[:-1], COMPACTED_REWARDS[-1] + FINAL]
    for index in turns:
        turn = trajectory.turns[index]
        start = len(turn.prompt_token_ids or [])
        end = start + len(turn.completion_token_ids or [])
        rewards[end - 1] = finals[index]
        returns[start:end] = [COMPACTED_RETURNS[index]] * (end - start)
    return rewards, returns


def test_a_compacted_episodes_rows_carry_their_segments_turn_rewards(
    compacted: Trajectory,
) -> None:
    from envhub.trainers.skyrl import generator_output
    from envhub.trainers.trl_rollout import EnvhubRollout
    from envhub.trainers.verl import agent_loop_outputs

    assert not compacted.masked and compacted.reward == FINAL
    assert compacted.segment_starts() == [0, 3]
    assert [t.reward for t in compacted.turns] == COMPACTED_REWARDS
    assert turn_returns(compacted, 0.5) == COMPACTED_RETURNS
    segments = (range(0, 3), range(3, 6))
    expected = [_segment_expected(compacted, turns) for turns in segments]
    batch = build_batch([compacted], drop_zero_variance=False, return_tensors=None, gamma=0.5)
    assert [row.segment for row in batch.rows] == [0, 1]
    for row, (rewards, returns), padded_rewards, padded_returns in zip(
        batch.rows, expected, batch.token_rewards, batch.returns, strict=True
    ):
        assert padded_rewards[: len(row)] == rewards and padded_returns[: len(row)] == returns
    # the final reward is on the last segment's last sampled token only
    assert sum(map(sum, batch.token_rewards)) == sum(turn_rewards(compacted))
    cuts = [len(compacted.turns[turns[0]].prompt_token_ids or []) for turns in segments]
    trl = EnvhubRollout(envhub.make(MarkEnv), policy=object()).to_trl(
        [compacted], eos_token_id=0, gamma=0.5
    )
    assert trl["segment"] == [0, 1]
    assert trl["token_rewards"] == [r[cut:] for (r, _), cut in zip(expected, cuts, strict=True)]
    assert trl["returns"] == [r[cut:] for (_, r), cut in zip(expected, cuts, strict=True)]
    verl = agent_loop_outputs([compacted], gamma=0.5)
    assert [o["extra_fields"]["envhub_segment"] for o in verl] == [0, 1]
    for output, (rewards, returns), cut in zip(verl, expected, cuts, strict=True):
        assert output["extra_fields"]["envhub_token_rewards"] == rewards[cut:]
        assert output["extra_fields"]["envhub_returns"] == returns[cut:]
    assert [o["extra_fields"]["turn_scores"] for o in verl] == [
        COMPACTED_REWARDS[:3], COMPACTED_REWARDS[3:]
    ]
    skyrl = generator_output([compacted], turn_level=True)
    assert skyrl["rewards"] == [r[cut:] for (r, _), cut in zip(expected, cuts, strict=True)]
