"""The trajectory file: crash-safe appends, torn-line handling, export through datasets,
and what a tool result records."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

import envhub
from envhub.clients.remote import RemoteEnvironment
from envhub.errors import InvalidRequest
from envhub.server import create_app
from envhub.task import GoldCall
from envhub.testing import replay_calls, serve_in_thread
from envhub.trajectory import (
    EnvRef,
    Trajectory,
    TrajectoryWriter,
    Turn,
    export_trajectories,
    read_records,
    read_trajectories,
)
from tests.rollout.helpers import openai_policy
from tests.rollout.scripted_server import ScriptConfig, ScriptedServer


def make_trajectory(task_id: str, sample_index: int, *, masked: bool = False) -> Trajectory:
    return Trajectory(
        trajectory_id=f"{task_id}-{sample_index}",
        group_id=f"{task_id}#0",
        task_id=task_id,
        sample_index=sample_index,
        env=EnvRef(name="calc", version="0.1.0"),
        model="m",
        messages=[
            {"role": "user", "content": "2+2?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c0",
                        "type": "function",
                        "function": {"name": "answer", "arguments": '{"value": "4"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c0", "content": "answer recorded"},
        ],
        turns=[
            Turn(
                message_index=1,
                latency_s=0.1,
                prompt_token_ids=[1, 2],
                completion_token_ids=[3],
                completion_logprobs=[-0.5],
                finish_reason="tool_calls",
            )
        ],
        reward=None if masked else 1.0,
        masked=masked,
        reward_components={} if masked else {"correct": 1.0},
    )


def test_writer_appends_and_reader_validates(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TrajectoryWriter(path) as writer:
        writer.write(make_trajectory("a", 0))
        writer.write(make_trajectory("a", 1, masked=True))
    with TrajectoryWriter(path) as writer:  # reopening appends
        writer.write(make_trajectory("b", 0))
    loaded = list(read_trajectories(path))
    assert [(t.task_id, t.sample_index) for t in loaded] == [("a", 0), ("a", 1), ("b", 0)]
    assert loaded[1].masked and loaded[1].reward is None
    assert loaded[0].turns[0].completion_token_ids == [3]


def test_torn_last_line_is_ignored_and_cut_before_appending(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TrajectoryWriter(path) as writer:
        writer.write(make_trajectory("a", 0))
    whole = make_trajectory("a", 1).model_dump_json().encode()
    with open(path, "ab") as fh:
        fh.write(whole[: len(whole) // 2])  # a writer killed mid-record
    assert [r["sample_index"] for r in read_records(path)] == [0]
    with TrajectoryWriter(path) as writer:
        writer.write(make_trajectory("a", 1))
    assert [r["sample_index"] for r in read_records(path)] == [0, 1]
    assert path.read_bytes().endswith(b"\n")


def test_corruption_in_the_middle_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    line = make_trajectory("a", 0).model_dump_json()
    path.write_text(line + "\n{not json\n" + line + "\n")
    with pytest.raises(InvalidRequest, match=":2:"):
        list(read_records(path))


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_export_loads_with_datasets(tmp_path: Path, fmt: str) -> None:
    import datasets

    path = tmp_path / "t.jsonl"
    pinned = EnvRef(name="calc", version="0.1.0", distribution="envhub-rl-calc",
                    distribution_version="0.2.0", task_set_hash="sha256:0a1b")
    with TrajectoryWriter(path) as writer:
        writer.write(make_trajectory("a", 0).model_copy(update={"env": pinned}))
        writer.write(make_trajectory("a", 1, masked=True))  # no pins: written before them
    out = tmp_path / f"t.{fmt}"
    assert export_trajectories(path, out, fmt) == 2  # type: ignore[arg-type]
    builder = "parquet" if fmt == "parquet" else "json"
    data = datasets.load_dataset(builder, data_files=str(out), split="train")
    assert data.num_rows == 2
    first = data[0]
    assert first["turns"][0]["prompt_token_ids"] == [1, 2]
    assert first["turns"][0]["completion_logprobs"] == [-0.5]
    assert json.loads(first["messages"])[1]["tool_calls"][0]["function"]["name"] == "answer"
    assert data[1]["masked"] is True and data[1]["reward"] is None
    assert first["env"] == pinned.model_dump()  # the pins are columns too
    assert data[1]["env"]["task_set_hash"] is None
    # every field of the record is a column: a field added without its column fails export
    assert set(data.column_names) == set(Trajectory.model_fields)
    assert set(first["turns"][0]) == set(Turn.model_fields)


def test_stop_reason_uses_the_one_stop_reason_vocabulary() -> None:
    """A trajectory's stop reason is a session's, a rollout's or an environment's ``env:``
    label; anything else (a typo, another tool's vocabulary) is refused when it is built or
    read back, so summaries count one set of names."""
    from pydantic import ValidationError

    record = make_trajectory("t", 0).model_dump()
    for reason in ("terminal_tool", "context_length", "model_error", "env_error", "env:won"):
        assert Trajectory.model_validate({**record, "stop_reason": reason}).stop_reason == reason
    for reason in ("end_turn", "env_failure", "env:", "goal_reached"):
        with pytest.raises(ValidationError):
            Trajectory.model_validate({**record, "stop_reason": reason})


async def test_an_episode_of_calls_that_are_not_text_is_written_and_read_back(
    tmp_path: Path,
) -> None:
    """An in-process policy's calls can hold unpaired surrogates (in a name, in
    arguments, in the final answer): the session refuses them and the episode is scored,
    and its record is written with each raw one as U+FFFD, not lost to an encoding error
    (arguments the policy encoded as JSON keep their ``\\ud800`` escapes)."""
    env = envhub.make("calc")
    calls = [
        GoldCall(name="calculate\ud800", arguments={"expression": "\udcff"}),
        GoldCall(name="calculate", arguments={"expression": "1 + \ud800"}),
        GoldCall(name="", arguments={"content": "4\ud800"}),
    ]
    trajectory = await replay_calls(env, (await env.task_ids())[0], calls)
    assert not trajectory.masked and trajectory.metrics.tool_errors == 2
    path = tmp_path / "t.jsonl"
    writer = TrajectoryWriter(path)
    writer.write(trajectory)
    writer.close()
    [back] = read_trajectories(path)
    assert back.reward == trajectory.reward
    [call] = back.messages[2]["tool_calls"]
    assert call["function"]["name"] == "calculate\ufffd"
    assert back.messages[-1]["content"] == "4\ufffd"


FLAGGED_SCRIPT = [
    {"tool_calls": [{"name": "calculate", "arguments": '{"expression": "2 +'}]},  # malformed
    {"tool_calls": [{"name": "n" * 200, "arguments": "{}"}]},  # unknown: its error is cut
    {"tool_calls": [{"name": "calculate", "arguments": '{"expression": "2 + 3"}'}]},
    {"tool_calls": [{"name": "answer", "arguments": '{"value": "5"}'}]},
]


@pytest.mark.parametrize("where", ["in_process", "server"])
async def test_tool_results_record_is_error_and_truncated_which_the_model_never_sees(
    scripted: Callable[..., ScriptedServer], tmp_path: Path, where: str
) -> None:
    """The trajectory says which tool results were errors and which the session cut (in
    process and across a server), so no reader guesses from the text; the requests to the
    model carry neither flag (OpenAI refuses keys it does not know in a message)."""
    server = scripted(ScriptConfig(turns=FLAGGED_SCRIPT, record_bodies=True))
    env = envhub.make("calc", max_output_chars=200)
    policy = openai_policy(server.base_url)
    output = tmp_path / "run.jsonl"
    try:
        if where == "in_process":
            await envhub.rollout.run(env, policy, ["calc-0-00000"], output=output)
        else:
            with serve_in_thread(create_app({"calc": env})) as url:
                async with RemoteEnvironment(url, "calc") as remote:
                    await envhub.rollout.run(remote, policy, ["calc-0-00000"], output=output)
    finally:
        await policy.aclose()
    [trajectory] = read_trajectories(output)
    results = [m for m in trajectory.messages if m["role"] == "tool"]
    flags = [(m["is_error"], m["truncated"]) for m in results]
    assert flags == [(True, False), (True, True), (False, False), (False, False)]
    assert "[truncated " in results[1]["content"]
    sent = [m for body in server.stats.bodies for m in body["messages"]]
    assert len(server.stats.bodies) == len(FLAGGED_SCRIPT)
    assert sum(m["role"] == "tool" for m in sent) == 0 + 1 + 2 + 3
    assert all("is_error" not in m and "truncated" not in m for m in sent)
