"""Context compaction (issue 34): a 40-turn ``calc`` episode against the scripted
OpenAI-compatible server (real uvicorn), compacted at its threshold.

The server records every request body and answers with token ids of the messages it
received (its stand-in tokenizer), so "each segment's prompt ids are what the model was
fed" is checked against what actually crossed the wire; the trainer adapters (GRPO rows,
TRL samples, verl outputs) must give one row per segment with the loss on the sampled
tokens only.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import envhub
from envhub.errors import InvalidRequest
from envhub.rollout import CompactionConfig, run, stream
from envhub.rollout.compaction import (
    DROPPED_OUTPUT,
    SUMMARY_HEADER,
    CompactAt,
    KeepLastTurns,
    make_strategy,
)
from envhub.runtime.sync import run_sync
from envhub.trainers.grpo import build_batch
from envhub.trainers.token_rows import TokenRow, trajectory_rows
from envhub.trainers.trl_rollout import EnvhubRollout
from envhub.trainers.verl import agent_loop_output, agent_loop_outputs
from envhub.trajectory import (
    Trajectory,
    TrajectoryWriter,
    export_trajectories,
    read_trajectories,
)
from envhub.types import chat_message
from tests.rollout.helpers import openai_policy
from tests.rollout.scripted_server import ScriptConfig, ScriptedServer, calc_script, tokenize

TURNS = 40
SUMMARY = "I multiplied 1..8 by 7 with the calculate tool."


def _server(**options: Any) -> ScriptedServer:
    options.setdefault("turns", calc_script(TURNS + 1))
    config = ScriptConfig(token_ids=True, record_bodies=True,
                          replies=deque([SUMMARY]), **options)  # fmt: skip
    return ScriptedServer(config).start()


@pytest.fixture(scope="module")
def env() -> envhub.LocalEnvironment:
    return envhub.make("calc", num_tasks=4, max_turns=TURNS)


async def _episode(
    env: envhub.LocalEnvironment, server: ScriptedServer, compaction: CompactionConfig | None
) -> Trajectory:
    """One episode through the Python API (``envhub.rollout.run``)."""
    policy = openai_policy(server.base_url)
    try:
        result = await run(env, policy, [(await env.task_ids())[0]], max_turns=TURNS,
                           compaction=compaction, max_masked_fraction=None)  # fmt: skip
    finally:
        await policy.aclose()
    assert result.trajectories is not None
    [trajectory] = result.trajectories
    return trajectory


@pytest.fixture(scope="module")
def summarized(env: envhub.LocalEnvironment) -> Iterator[tuple[Trajectory, list[dict[str, Any]]]]:
    """A 40-turn episode summarized every 8 turns, and the bodies the server received."""
    server = _server()
    try:
        compaction = CompactionConfig.of("turns:8", "summarize", keep=2)
        trajectory = run_sync(_episode(env, server, compaction))
        yield trajectory, list(server.stats.bodies)
    finally:
        server.stop()


def test_a_long_episode_is_compacted_at_the_threshold(
    summarized: tuple[Trajectory, list[dict[str, Any]]],
) -> None:
    trajectory, bodies = summarized
    assert not trajectory.masked, trajectory.error
    assert trajectory.stop_reason == "max_turns" and len(trajectory.turns) == TURNS
    compactions = trajectory.compactions or []
    assert [c.turn for c in compactions] == [8, 16, 24, 32]
    assert trajectory.segment_starts() == [0, 8, 16, 24, 32]
    assert {c.strategy for c in compactions} == {"summarize"}
    assert {c.trigger for c in compactions} == {"turns:8"}
    # the whole conversation is kept: every turn's assistant message in order
    assert len(trajectory.messages) == compactions[-1].message_index + 2 * 8
    for compaction in compactions:
        assert compaction.summary is not None and compaction.summary.text == SUMMARY
        assert compaction.summary.model == "scripted"
        summaries = [m for m in compaction.messages if str(m.get("content")).startswith(
            SUMMARY_HEADER)]  # fmt: skip
        assert len(summaries) == 1  # a later summary replaces the earlier one
        assert sum(m["role"] == "assistant" for m in compaction.messages) == 2  # keep=2
    # 40 model calls with tools, 4 summary calls without
    model_calls = [b for b in bodies if b.get("tools")]
    summary_calls = [b for b in bodies if not b.get("tools")]
    assert len(model_calls) == TURNS and len(summary_calls) == 4
    assert summary_calls[0]["messages"][-1]["role"] == "user"


def test_each_segment_records_exactly_what_the_server_received(
    summarized: tuple[Trajectory, list[dict[str, Any]]],
) -> None:
    trajectory, bodies = summarized
    model_calls = [b for b in bodies if b.get("tools")]
    starts = trajectory.segment_starts()
    for index, (turn, body) in enumerate(zip(trajectory.turns, model_calls, strict=True)):
        # the server's token ids are its tokenization of the messages it was sent
        assert turn.prompt_token_ids == [t for m in body["messages"] for t in tokenize(m)]
        segment = trajectory.segment_of(index)
        context, shift = trajectory.segment_context(segment)
        assert [chat_message(m) for m in context[: turn.message_index + shift]] == (
            body["messages"]
        )
        assert turn.prefix_ok is (None if index in starts else True)
    # prompts stop growing: the last segment's prompts are far shorter than uncompacted
    assert len(trajectory.turns[-1].prompt_token_ids or []) < 0.5 * sum(
        len(tokenize(m)) for m in trajectory.messages
    )


def _assert_sampled_only(row: TokenRow, trajectory: Trajectory, turns: range) -> None:
    """``row`` is the last of ``turns``' sequence, the loss on their completions only."""
    last = trajectory.turns[turns[-1]]
    assert row.mask_reason is None
    assert row.input_ids == (last.prompt_token_ids or []) + (last.completion_token_ids or [])
    expected = [0] * len(row)
    for index in turns:
        turn = trajectory.turns[index]
        start, ids = len(turn.prompt_token_ids or []), turn.completion_token_ids or []
        assert row.input_ids[start : start + len(ids)] == ids
        expected[start : start + len(ids)] = [1] * len(ids)
    assert row.loss_mask == expected
    assert [s[0] for s in row.spans] == list(turns)


def test_trainer_rows_one_per_segment_with_the_loss_on_sampled_tokens(
    summarized: tuple[Trajectory, list[dict[str, Any]]], env: envhub.LocalEnvironment
) -> None:
    trajectory, _ = summarized
    bounds = [*trajectory.segment_starts(), TURNS]
    segments = [range(a, b) for a, b in itertools.pairwise(bounds)]
    for drift in ("split", "mask"):  # a compaction is no drift: never masked for it
        rows = trajectory_rows(trajectory, drift=drift)
        assert len(rows) == len(segments) == 5
        for row, turns in zip(rows, segments, strict=True):
            _assert_sampled_only(row, trajectory, turns)
    batch = build_batch([trajectory], drop_zero_variance=False, pad_token_id=0,
                        drift="mask", return_tensors=None)  # fmt: skip
    assert len(batch.input_ids) == 5

    trl = EnvhubRollout(env).to_trl([trajectory], eos_token_id=0)
    assert trl["segment"] == [0, 1, 2, 3, 4]
    assert set(trl["trajectory_id"]) == {trajectory.trajectory_id}
    verl = agent_loop_outputs([trajectory])
    assert [o["extra_fields"]["envhub_segment"] for o in verl] == [0, 1, 2, 3, 4]
    for turns, sample, output in zip(segments, zip(*trl.values(), strict=True), verl,
                                     strict=True):  # fmt: skip
        sample = dict(zip(trl, sample, strict=True))
        first = trajectory.turns[turns[0]]
        sampled = [t for i in turns for t in trajectory.turns[i].completion_token_ids or []]
        # the prompt is the segment's first prompt: the compacted context the model was fed
        assert sample["prompt_ids"] == first.prompt_token_ids == output["prompt_ids"]
        for ids, mask in ((sample["completion_ids"], sample["env_mask"]),
                          (output["response_ids"], output["response_mask"])):  # fmt: skip
            assert [t for t, m in zip(ids, mask, strict=True) if m] == sampled
        assert sample["env_reward"] == output["reward_score"] == trajectory.reward
    with pytest.raises(InvalidRequest, match="agent_loop_outputs"):
        agent_loop_output(trajectory)


def test_the_record_round_trips_and_old_lines_still_read(
    summarized: tuple[Trajectory, list[dict[str, Any]]], tmp_path: Path
) -> None:
    trajectory, _ = summarized
    path = tmp_path / "t.jsonl"
    old = trajectory.model_dump(mode="json")
    old_compactions = old.pop("compactions")  # a line written before compaction existed
    with TrajectoryWriter(path) as writer:
        writer.write(trajectory)
    with path.open("a") as fh:
        fh.write(json.dumps(old) + "\n")
    again, before = read_trajectories(path)
    assert again == trajectory
    export_trajectories(path, tmp_path / "t.export.jsonl", "jsonl")
    exported = [json.loads(line) for line in (tmp_path / "t.export.jsonl").open()]
    assert json.loads(exported[0]["compactions"]) == old_compactions
    assert exported[1]["compactions"] is None
    assert before.compactions is None and before.segment_starts() == [0]
    assert len(trajectory_rows(before, drift="split")) > 1  # no segments: drift splits


async def test_token_threshold_and_the_other_strategies(
    env: envhub.LocalEnvironment,
) -> None:
    server = _server()
    divisions = [  # results of 12 characters, some of 3 ("1.0", "2.0")
        {"tool_calls": [{"name": "calculate", "arguments": f'{{"expression": "{i} / 7"}}'}]}
        for i in range(1, TURNS + 1)
    ]
    dividing = _server(turns=divisions)
    try:
        # the scripted server counts 10 prompt tokens per message (+7 completion tokens)
        kept = await _episode(env, server, CompactionConfig.of("tokens:200", "keep-last-k",
                                                                keep=1))  # fmt: skip
        dropping = CompactionConfig.of("turns:5", "drop-tool-outputs")
        dropped = await _episode(env, dividing, dropping)
    finally:
        server.stop()
        dividing.stop()
    for trajectory in (kept, dropped):
        assert not trajectory.masked, trajectory.error
        assert len(trajectory.turns) == TURNS
    for compaction in kept.compactions or []:
        assert compaction.tokens_before is not None and compaction.tokens_before >= 200
        assert compaction.summary is None
        assert sum(m["role"] == "assistant" for m in compaction.messages) == 1
    # 2 opening messages + 2 per turn: 200 tokens at 10 turns, then at 9 more each time
    assert [c.turn for c in kept.compactions or []] == [10, 19, 28, 37]
    # drop-tool-outputs keeps every message, with the old results replaced where longer
    for compaction in dropped.compactions or []:
        assert len(compaction.messages) == compaction.replaced_messages
        contents = [m["content"] for m in compaction.messages if m["role"] == "tool"]
        originals = [m["content"] for m in dropped.messages if m["role"] == "tool"]
        for content, original in zip(contents[:-2], originals, strict=False):
            assert content == (DROPPED_OUTPUT if len(original) > len(DROPPED_OUTPUT)
                               else original)  # fmt: skip
        assert contents[-2:] == originals[len(contents) - 2 : len(contents)]
    assert [c.turn for c in dropped.compactions or []] == [5, 10, 15, 20, 25, 30, 35]


async def test_a_separate_summarizer_and_its_failures(env: envhub.LocalEnvironment) -> None:
    model, summarizer = _server(), _server()
    empty = _server()
    empty.config.replies = deque(["   "])
    try:
        config = CompactionConfig.of("turns:10", "summarize",
                                     summarizer=openai_policy(summarizer.base_url))  # fmt: skip
        trajectory = await _episode(env, model, config)
        assert config.summarizer is not None
        await config.summarizer.aclose()
        assert not trajectory.masked and len(trajectory.compactions or []) == 3
        assert all(b.get("tools") for b in model.stats.bodies)  # no summary call here
        assert len(summarizer.stats.bodies) == 3
        # an empty summary (an untrusted answer) masks the episode, never scores it 0
        failed = await _episode(env, empty, CompactionConfig.of("turns:10", "summarize"))
        assert failed.masked and failed.reward is None
        assert failed.error is not None and failed.error.kind == "compaction_error"
        assert failed.stop_reason == "model_error" and len(failed.turns) == 10
    finally:
        for server in (model, summarizer, empty):
            server.stop()


async def test_the_stream_compacts_and_builds_a_batch_per_segment(
    env: envhub.LocalEnvironment,
) -> None:
    server = _server()
    policy = openai_policy(server.base_url)
    try:
        async with stream(env, policy, (await env.task_ids())[:1], group_size=2, batch_size=1,
                          max_turns=12, compaction=CompactionConfig.of("turns:5",
                                                                       "keep-last-k")) as rollouts:
            [group] = await rollouts.next_batch()
    finally:
        await policy.aclose()
        server.stop()
    assert [[c.turn for c in t.compactions or []] for t in group.trajectories] == [[5, 10]] * 2
    batch = build_batch(group.trajectories, drop_zero_variance=False, pad_token_id=0,
                        return_tensors=None)  # fmt: skip
    assert len(batch.input_ids) == 2 * 3  # three segments per episode


async def test_unsupported_combinations_and_bad_specs_are_typed_errors(
    env: envhub.LocalEnvironment,
) -> None:
    for spec in ("turns", "turns:0", "words:3", "tokens:-1"):
        with pytest.raises(InvalidRequest, match="turns:N or tokens:N"):
            CompactAt.parse(spec)
    with pytest.raises(InvalidRequest, match="unknown compaction strategy 'fold'; choose one "
                       "of drop-tool-outputs, keep-last-k, summarize"):
        make_strategy("fold")
    with pytest.raises(InvalidRequest, match="must be >= 0"):
        make_strategy("summarize", keep=-1)
    # a strategy of one's own, by module:Name (or the envhub.compaction_strategies group)
    own = make_strategy("envhub.rollout.compaction:KeepLastTurns", keep=3)
    assert isinstance(own, KeepLastTurns) and own.keep == 3
    from envhub.rollout import TreeConfig, make_branch_rule

    policy = openai_policy("http://127.0.0.1:9/v1")
    with pytest.raises(InvalidRequest, match="not combined with --tree"):
        await run(env, policy, compaction=CompactionConfig.of("turns:3"),
                  tree=TreeConfig(make_branch_rule("fixed:1")))  # fmt: skip
    await policy.aclose()


def test_the_cli_compacts_and_refuses_bad_options(tmp_path: Path) -> None:
    server = _server()
    output = tmp_path / "out.jsonl"
    envhub_cli = [sys.executable, "-c",
                  "import envhub.cli.rollout; from envhub.cli import main; main()"]  # fmt: skip
    try:
        done = subprocess.run(
            [*envhub_cli, "rollout", "calc", "-o", str(output), "--base-url", server.base_url,
             "--model", "scripted", "--tasks", "0:1", "--max-turns", "12",
             "--compact-at", "turns:4", "--compact-strategy", "keep-last-k",
             "--compact-keep", "1"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        [trajectory] = read_trajectories(output)
        assert [c.turn for c in trajectory.compactions or []] == [4, 8]
        assert {c.strategy for c in trajectory.compactions or []} == {"keep-last-k"}
        bad = subprocess.run(
            [*envhub_cli, "rollout", "calc", "-o", str(output), "--base-url", server.base_url,
             "--compact-at", "turns:4", "--tree"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert bad.returncode == 2
        assert bad.stderr.strip().splitlines() == [
            "error: context compaction is not combined with --tree in this release: drop "
            "--tree or --compact-at"
        ]
    finally:
        server.stop()
