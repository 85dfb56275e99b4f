"""Run files for the viewer tests: real rollouts on calc, and big synthetic files."""

from __future__ import annotations

import asyncio
from collections import deque
from pathlib import Path

import orjson

import envhub
from envhub.policies import ReferencePolicy
from envhub.rollout.run import run
from tests.rollout.helpers import openai_policy
from tests.rollout.scripted_server import ScriptConfig, ScriptedServer

TASKS = "0:6"
POLICY_VERSION = 7  # the weights version the scripted run records on each turn
GROUP = 2


def scripted_run(path: Path) -> None:
    """Calc by the scripted model (3 turns, token ids and logprobs): one malformed tool
    call (an ``is_error`` result) and one episode masked after its model calls failed."""
    faults = deque(["malformed", "", ""] + ["500"] * 4)  # "": no fault
    config = ScriptConfig(token_ids=True, faults=faults)

    async def go(base_url: str) -> None:
        policy = openai_policy(base_url, token_ids=True)
        try:
            await run(
                envhub.make("calc"), policy, TASKS, group_size=GROUP, concurrency=1,
                output=path, max_masked_fraction=None, policy_version=POLICY_VERSION,
            )  # fmt: skip
        finally:
            await policy.aclose()

    with ScriptedServer(config) as server:
        asyncio.run(go(server.base_url))


def reference_run(path: Path) -> None:
    """The same tasks replayed from their gold actions (all rewards 1)."""
    asyncio.run(run(envhub.make("calc"), ReferencePolicy(), TASKS, group_size=GROUP, output=path))


def minimal_record(i: int, tasks: int = 1000) -> dict[str, object]:
    """A small valid trajectory: task ``i % tasks``, sample ``i // tasks``."""
    masked = i % 50 == 7
    return {
        "trajectory_id": f"t{i}", "group_id": f"g{i % tasks}", "task_id": f"task-{i % tasks:05d}",
        "sample_index": i // tasks, "env": {"name": "calc", "version": "0.1.0"}, "model": "m",
        "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "",
                     "tool_calls": [{"id": "c", "type": "function", "function": {
                         "name": "calculate" if i % 3 else "answer", "arguments": "{}"}}]}],
        "reward": None if masked else (i % 10) / 10, "masked": masked,
        "error": {"kind": "policy_error", "message": "x"} if masked else None,
        "stop_reason": "terminal_tool" if i % 4 else "max_turns",
        "metrics": {"turns": 1 + i % 5, "tool_calls": 1, "tool_errors": 0},
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
    }  # fmt: skip


def big_run(path: Path, count: int) -> None:
    with open(path, "wb") as fh:
        for start in range(0, count, 10_000):
            fh.write(b"".join(orjson.dumps(minimal_record(i)) + b"\n"
                              for i in range(start, min(count, start + 10_000))))  # fmt: skip
