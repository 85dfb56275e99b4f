"""Restarts from a gold prefix (issue 33): a scripted model that cannot make a task's
first move (its first call is ``step(99)``) but plays every later step right never
solves the six-step ``medium`` task of :mod:`tests.rollout.curriculum_env` from scratch,
and always does from turn 3 of the gold replay. After ``--gold-restart-after 2`` failed
samples every other group of it starts from that prefix: its first turns are the gold
calls (no token ids: nothing sampled them), the rest the model's, and the record says
how many were gold. The one-step ``easy`` task, as hopeless, has too few gold actions to
restart. Each group replays its prefix once and forks it for its other members."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import envhub
from envhub.clients.local import LocalEnvironment
from envhub.policies import make_policy
from envhub.protocol import SessionHandle
from envhub.rollout import run, run_sync
from envhub.rollout.curriculum import sampler_path
from envhub.runtime.sync import run_sync as on_background_loop
from envhub.trajectory import read_records
from tests.rollout.curriculum_env import ENV_ID
from tests.rollout.scripted_server import ScriptConfig, ScriptedServer

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "envhub.cli", "rollout", ENV_ID, "--env-arg", "per_kind=1"]
FIRST_MOVE_WRONG = [{"tool_calls": [{"name": "step", "arguments": '{"index": 99}'}]}] + [
    {"tool_calls": [{"name": "step", "arguments": f'{{"index": {i}}}'}]} for i in range(1, 6)
]


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(ScriptConfig(turns=FIRST_MOVE_WRONG, token_ids=True)) as started:
        yield started


def step_indexes(record: dict[str, Any]) -> list[int]:
    calls = [m["tool_calls"][0] for m in record["messages"] if m.get("tool_calls")]
    return [json.loads(call["function"]["arguments"])["index"] for call in calls]


def test_never_solved_tasks_restart_from_a_gold_prefix_and_resume_continues(
    server: ScriptedServer, tmp_path: Path
) -> None:
    output = tmp_path / "run.jsonl"
    common = ["--tasks", "medium-0,easy-0", "--model", "scripted", "--base-url",
              server.base_url, "--token-ids", "on", "--group-size", "2", "--concurrency", "1",
              "--sampler", "uniform", "-o", str(output)]  # fmt: skip
    first = subprocess.run([*CLI, *common, "--groups", "2", "--gold-restart-after", "2"],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert "from a gold prefix (pass rate)" in first.stderr  # none yet: "0 (-)"
    for wrong, error in [
        ([], "sampled with gold restarts"),  # the saved state has them
        (["--gold-restart-after", "3"], "--gold-restart-after 2 --gold-prefix half"),
        (["--gold-restart-after", "2", "--gold-prefix", "0"], "a turn count >= 1"),
    ]:
        refused = subprocess.run([*CLI, *common, "--groups", "8", "--resume", *wrong], cwd=ROOT,
                                 capture_output=True, text=True, timeout=120)  # fmt: skip
        assert refused.returncode == 2 and error in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    resumed = subprocess.run([*CLI, *common, "--groups", "8", "--resume",
                              "--gold-restart-after", "2"],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr

    records = list(read_records(output))
    gold = [r for r in records if r["gold_prefix_turns"]]
    # medium-0#0 failed twice from scratch (the first process), so #1 restarts (the
    # second: the counts survived), #2 plays from scratch again, #3 restarts
    assert sorted({r["group_id"] for r in gold}) == ["medium-0#1", "medium-0#3"]
    for record in gold:
        assert record["gold_prefix_turns"] == 3 and record["reward"] == 1.0
        assert step_indexes(record) == [0, 1, 2, 3, 4, 5]  # gold 0-2, then the model's 3-5
        has_ids = [t["completion_token_ids"] is not None for t in record["turns"]]
        assert has_ids[:3] == [False] * 3 and all(has_ids[3:]), has_ids
    scratch = [r for r in records if not r["gold_prefix_turns"]]
    assert len(scratch) == 12 and all(r["reward"] == 0.0 for r in scratch)
    assert all(step_indexes(r)[0] == 99 for r in scratch)

    summary = json.loads(Path(f"{output}.summary.json").read_text())
    assert summary["gold_prefix_episodes"] == 4 and summary["gold_prefix_pass_rate"] == 1.0
    assert summary["pass_rate_by_task"] == {"easy-0": 0.0, "medium-0": 0.0}  # the policy's own
    assert "4 (1.000)" in resumed.stderr

    reference = tmp_path / "reference.jsonl"  # the same run, never stopped
    policy = make_policy("openai", model="scripted", base_urls=[server.base_url], token_ids="on")
    try:
        run_sync(envhub.make(ENV_ID, per_kind=1), policy, "medium-0,easy-0", group_size=2,
                 concurrency=1, sampler="uniform", groups=8, gold_restart_after=2,
                 output=reference)  # fmt: skip
    finally:
        on_background_loop(policy.aclose())
    mine = json.loads(sampler_path(output).read_text())
    assert mine == json.loads(sampler_path(reference).read_text())
    assert mine["gold"]["restarts"]["restarted"] == {"medium-0": 2}
    assert mine["gold"]["pending"] == {}


class CountingEnv:
    """A local environment that counts the sessions it opens (forks are not opened)."""

    def __init__(self, env: LocalEnvironment) -> None:
        self.env = env
        self.opened = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    async def open(self, task_id: str, **kwargs: Any) -> SessionHandle:
        self.opened += 1
        return await self.env.open(task_id, **kwargs)


async def test_a_group_replays_its_prefix_once_and_forks_it(
    server: ScriptedServer, tmp_path: Path
) -> None:
    """Four members in flight at once: the leader replays, the others wait for its forks."""
    env = CountingEnv(envhub.make(ENV_ID, per_kind=1))
    policy = make_policy("openai", model="scripted", base_urls=[server.base_url], token_ids="on")
    output = tmp_path / "run.jsonl"
    try:
        for groups in (1, 2):  # the first group fails from scratch, the second restarts
            env.opened = 0
            result = await run(env, policy, "medium-0", group_size=4, concurrency=4,  # type: ignore[arg-type]
                               sampler="uniform", groups=groups, gold_restart_after=4,
                               gold_prefix=10, output=output, resume=groups > 1)  # fmt: skip
    finally:
        await policy.aclose()
    assert env.opened == 1  # the restarted group: one session, forked for the three others
    records = list(read_records(output))
    prefixes = {g: {r["gold_prefix_turns"] for r in records if r["group_id"] == g}
                for g in ("medium-0#0", "medium-0#1")}  # fmt: skip
    assert prefixes == {"medium-0#0": {0}, "medium-0#1": {5}}  # 10: capped at all but one
    assert result.summary.gold_prefix_episodes == 4 and result.summary.gold_prefix_pass_rate == 1
    assert len({r["trajectory_id"] for r in records}) == 8
