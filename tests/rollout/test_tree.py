"""Tree rollouts (issue 33 item 3): ``envhub rollout --tree`` against the scripted model
server on calc, the stored-once prefixes, reading trees back whole, resume after kill -9,
the branch rules and the per-tree budget."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import envhub
from envhub.errors import InvalidRequest
from envhub.rollout import TreeConfig, make_branch_rule, stream
from envhub.rollout.run import run
from envhub.rollout.tree import EntropyRule, surprisal
from envhub.trajectory import (
    EnvRef,
    Trajectory,
    Turn,
    compact_trajectories,
    read_records,
    read_trajectories,
)
from tests.rollout.helpers import openai_policy, wait_for_lines
from tests.rollout.scripted_server import ScriptConfig, ScriptedServer, calc_script

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "import envhub.cli.rollout; from envhub.cli import main; main()"]


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    """Four-turn calc episodes, each reply carrying a random note (so branches differ and
    every assistant message is unique) and logprobs; request bodies kept."""
    config = ScriptConfig(turns=calc_script(4), token_ids=True, distinct_samples=True,
                          record_bodies=True)  # fmt: skip
    with ScriptedServer(config) as started:
        yield started


def rollout(server: ScriptedServer, output: Path, *extra: str) -> list[str]:
    return [*CLI, "rollout", "calc", "--model", "scripted", "--base-url", server.base_url,
            "--token-ids", "on", "--tree", "-o", str(output), *extra]  # fmt: skip


def shape(records: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    """Per tree: (nodes, leaves); a node per root plus, per branch point, its children
    and the parent's own continuation."""
    by_tree: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_tree.setdefault(record["tree_id"], []).append(record)
    result = {}
    for tree_id, members in by_tree.items():
        points = Counter((r["parent_id"], r["branch_turn"]) for r in members if r["parent_id"])
        result[tree_id] = (1 + sum(n + 1 for n in points.values()), len(members))
    return result


def assistant_notes(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "assistant"]


def test_cli_tree_counts_prefixes_stored_once_and_whole_on_reading(
    server: ScriptedServer, tmp_path: Path
) -> None:
    """fixed:1, m=2, depth 2 on four-turn episodes: 4 leaves and 7 nodes per tree (the
    depth limit stops a third fork); each shared assistant message is in the file once,
    and each trajectory read back is the conversation its model calls saw."""
    out = tmp_path / "tree.jsonl"
    server.stats.bodies.clear()
    done = subprocess.run(
        rollout(server, out, "--tasks", "0:3", "--branch-at", "fixed:1", "--branch-factor", "2",
                "--tree-depth", "2", "--concurrency", "2"),
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "trees (nodes / leaves)" in done.stderr and "3 (21 / 12)" in done.stderr
    summary = json.loads(Path(f"{out}.summary.json").read_text())
    assert (summary["trees"], summary["tree_nodes"], summary["tree_leaves"]) == (3, 21, 12)

    raw = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(raw) == 12
    assert sorted(shape(raw).values()) == [(7, 4)] * 3
    roots = [r for r in raw if r["parent_id"] is None]
    assert len(roots) == 3 and all(r["schema_version"] == 1 for r in roots)
    children = [r for r in raw if r["parent_id"] is not None]
    assert all(r["schema_version"] == 2 for r in children)
    assert Counter(r["branch_turn"] for r in children) == {1: 3, 2: 6}
    text = out.read_text()
    for root in roots:  # the root's first turn is shared by the whole tree: stored once
        first = assistant_notes(root["messages"])[0]
        assert text.count(json.dumps(first)[1:-1]) == 1
    for record in children:  # a child stores its own turns only
        assert len(record["turns"]) == 4 - record["branch_turn"]

    whole = list(read_trajectories(out))
    assert len(whole) == 12 and {t.schema_version for t in whole} == {1}
    by_id = {t.trajectory_id: t for t in whole}
    seen = {tuple(assistant_notes(body["messages"])) for body in server.stats.bodies}
    for trajectory in whole:
        notes = assistant_notes(trajectory.messages)
        assert len(trajectory.turns) == 4 and len(notes) == 4
        for turn in range(4):  # every model call saw exactly this history
            assert tuple(notes[:turn]) in seen
        if trajectory.parent_id is not None:
            parent = by_id[trajectory.parent_id]
            cut = trajectory.branch_message
            assert cut is not None and trajectory.messages[:cut] == parent.messages[:cut]
            own = notes[trajectory.branch_turn or 0]  # sampled after the branch point
            assert own not in assistant_notes(parent.messages)
    assert len({tuple(assistant_notes(t.messages)) for t in whole}) == 12


def test_resume_after_kill_9_reruns_partial_trees_only(
    tmp_path: Path, server: ScriptedServer
) -> None:
    """Killed mid-run with a partial tree at the end of the file, then ``--resume``: every
    task has exactly one complete tree, nothing masked, nothing twice."""
    slow = ScriptedServer(ScriptConfig(turns=calc_script(3), latency_s=0.02,
                                       token_ids=True, distinct_samples=True)).start()  # fmt: skip
    out = tmp_path / "killed.jsonl"
    args = rollout(slow, out, "--tasks", "train[0:12]", "--branch-at", "fixed:1",
                   "--branch-factor", "2", "--tree-depth", "2", "--concurrency", "2")  # fmt: skip
    try:
        proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            wait_for_lines(proc, out, 8)
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.wait(timeout=10)
        lines = out.read_bytes().splitlines(keepends=True)
        assert len(lines) < 48
        first_tree = json.loads(lines[0])["tree_id"]
        partial = [line.replace(first_tree.encode(), b"f" * 32) for line in lines[:3]]
        with open(out, "ab") as fh:  # as if killed in the middle of writing a tree
            fh.write(b"".join(partial) + b'{"schema_version": 2, "trajectory_id": "torn')
        written = Counter(json.loads(line)["tree_id"] for line in lines if line.endswith(b"\n"))
        complete = sum(n for n in written.values() if n == 4)
        assert len(list(read_records(out))) == complete  # complete trees only
        done = subprocess.run([*args, "--resume"], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
    finally:
        slow.stop()
    records = list(read_records(out))
    assert len(records) == 48 and not any(r["masked"] for r in records)
    assert len({(r["task_id"], r["sample_index"]) for r in records}) == 48
    assert sorted(shape(records).values()) == [(7, 4)] * 12
    assert len({r["tree_id"] for r in records}) == 12 == len({r["task_id"] for r in records})
    assert out.read_bytes().count(b"\n") == 48  # compacted: the partial tree is gone
    assert compact_trajectories(out) == 0


async def test_budget_fixed_k_and_the_stream(server: ScriptedServer, tmp_path: Path) -> None:
    """A leaf budget stops forks that would exceed it; fixed:K branches after K turns of
    each node; a stream hands each tree over as one group."""
    env = envhub.make("calc", num_tasks=20)
    policy = openai_policy(server.base_url, token_ids="on")
    try:
        budget = TreeConfig(make_branch_rule("fixed:1"), factor=3, depth=3, max_leaves=5)
        result = await run(env, policy, "0:2", tree=budget, concurrency=2)
        assert result.trajectories is not None and len(result.trajectories) == 10
        records = [t.model_dump() for t in result.trajectories]
        assert sorted(shape(records).values()) == [(7, 5)] * 2  # 1 + 3 + 3, two forks
        assert {t.sample_index for t in result.trajectories} == set(range(5))

        fixed = TreeConfig(make_branch_rule("fixed:2"), factor=3, depth=2)
        result = await run(env, policy, "0:1", tree=fixed, output=tmp_path / "f.jsonl")
        assert result.summary.tree_leaves == 3 and result.summary.tree_nodes == 4
        turns = [r["branch_turn"] for r in read_records(tmp_path / "f.jsonl")]
        assert turns == [None, 2, 2]  # a second fork would be after turn 4: the episode ended

        with pytest.raises(InvalidRequest, match="tree"):
            await run(env, policy, "0:1", tree=fixed, group_size=2)

        async with stream(env, policy, ["calc-0-00001", "calc-0-00002"], group_size=1,
                          batch_size=2, epochs=1, tree=fixed) as groups:  # fmt: skip
            batch = await groups.next_batch(timeout=30)
        assert sorted(g.task_id for g in batch) == ["calc-0-00001", "calc-0-00002"]
        for group in batch:
            assert len(group.trajectories) == 3
            assert len({t.tree_id for t in group.trajectories}) == 1
            assert all(len(t.turns) == 4 for t in group.trajectories)  # whole in memory
    finally:
        await policy.aclose()


def _turn(logprobs: list[float], index: int) -> Turn:
    return Turn(message_index=index, latency_s=0.0, completion_logprobs=logprobs)


def test_entropy_rule_branches_at_the_highest_surprisal_turn() -> None:
    """On recorded logprobs: mean surprisal per sampled token, and the rule branches
    exactly where it crosses the threshold."""
    trajectory = Trajectory(
        trajectory_id="t", group_id="g", task_id="calc-0-00001", sample_index=0,
        env=EnvRef(name="calc", version="0"), model="m", messages=[],
        turns=[_turn([-0.1, -0.3], 1), _turn([-2.0, -0.4, -1.2], 3), _turn([-0.5], 5),
               Turn(message_index=7, latency_s=0.0)],
    )  # fmt: skip
    values = [surprisal(turn) for turn in trajectory.turns]
    assert values[:3] == pytest.approx([0.2, 1.2, 0.5]) and values[3] is None
    rule = make_branch_rule("entropy:1.0")
    assert isinstance(rule, EntropyRule) and rule.threshold == 1.0
    picks = [rule.branches(trajectory.turns[: i + 1], 0) for i in range(4)]
    assert picks == [False, True, False, False]  # the top turn; none without logprobs
    assert make_branch_rule("entropy") == EntropyRule(0.5)
    for bad in ("entropy:-1", "entropy:nan", "fixed:0", "fixed", "every:2", "nope"):
        with pytest.raises(InvalidRequest):
            make_branch_rule(bad)


def test_cli_refuses_bad_tree_options_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [*CLI, "rollout", "calc", "--policy", "reference", "--tree", "--branch-at", "fixed:x",
         "-o", str(tmp_path / "x.jsonl")], cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "fixed:K" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


async def test_a_deadline_cancels_trees_in_flight_and_resume_finishes_them(
    tmp_path: Path,
) -> None:
    """Trees in flight at the deadline are cancelled whole (no line of theirs written);
    ``resume`` runs exactly those."""
    slow = ScriptedServer(ScriptConfig(turns=calc_script(3), latency_s=0.03,
                                       distinct_samples=True)).start()  # fmt: skip
    env = envhub.make("calc", num_tasks=20)
    policy = openai_policy(slow.base_url)
    out = tmp_path / "deadline.jsonl"
    tree = TreeConfig(make_branch_rule("every"), factor=2, depth=2)
    try:
        first = await run(env, policy, "train[0:6]", tree=tree, output=out, concurrency=1,
                          time_limit_s=0.2)  # fmt: skip
        assert first.summary.stopped == "deadline" and first.summary.missing
        kept = list(read_records(out))
        assert len(kept) == 4 * len({r["tree_id"] for r in kept}) < 24
        again = await run(env, policy, "train[0:6]", tree=tree, output=out, resume=True)
    finally:
        await policy.aclose()
        slow.stop()
    assert again.summary.missing == 0 and again.summary.tree_leaves == 24
    records = list(read_records(out))
    assert sorted(shape(records).values()) == [(7, 4)] * 6
    assert {r["tree_id"] for r in kept} <= {r["tree_id"] for r in records}  # kept, not rerun
