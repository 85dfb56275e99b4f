"""Calls that would make BFCL's code run for minutes never stop the server: arguments
that drive the cost are refused where they enter, and a call that still runs past its
timeout is killed with the process it runs in; the episode keeps its state, and it is
scored (the model chose the call), never masked."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import envhub
from envhub import GoldCall, RemoteEnvironment
from envhub.policies.reference import ReferencePolicy
from envhub.protocol import SessionHandle
from envhub.rollout.episode import EpisodeRunner, EpisodeSpec
from envhub.testing import call_tool, serve_in_subprocess
from envhub.types import Observation

#: ``round(5, -12_000_000)``: 13 s of one core on the auditor's machine (issue 29, item 4)
HOSTILE_ROUND = GoldCall(
    name="round_number", arguments={"number": 5, "decimal_places": -12_000_000}
)


#: GET /health every 50 ms until the stop file appears, then print the longest time
#: between two answers; a process of its own, so that nothing the test's client does
#: (encoding a 13 MB call holds this process's GIL) is counted against the server
_POLL_HEALTH = """
import os, sys, time, httpx
url, stop = sys.argv[1:3]
longest, last = 0.0, time.monotonic()
with httpx.Client(base_url=url, timeout=120) as client:
    while not os.path.exists(stop):
        client.get("/health").raise_for_status()
        now = time.monotonic()
        longest, last = max(longest, now - last), now
        time.sleep(0.05)
print(longest)
"""


@contextlib.contextmanager
def _longest_health_gap(url: str, folder: Path) -> Iterator[list[float]]:
    """Poll ``url``'s /health while the block runs; the list gets the longest gap (s)."""
    stop = folder / "stop-polling"
    poller = subprocess.Popen(
        [sys.executable, "-c", _POLL_HEALTH, url, str(stop)], stdout=subprocess.PIPE, text=True
    )
    longest: list[float] = []
    try:
        yield longest
    finally:
        stop.touch()
        out, _ = poller.communicate(timeout=120)
    assert poller.returncode == 0, "the /health poller failed"
    longest.append(float(out))


def _big_file_calls(lines: int) -> list[GoldCall]:
    """A file of ``lines`` distinct lines (hex numbers, shuffled), sorted, then removed:
    the sort takes about 0.7 s a million lines here, the rest a fraction."""
    content = "\n".join(f"{i * 7919 % lines:x}" for i in range(lines))
    return [
        GoldCall(name="touch", arguments={"file_name": "big.txt"}),
        GoldCall(name="echo", arguments={"content": content, "file_name": "big.txt"}),
        GoldCall(name="sort", arguments={"file_name": "big.txt"}),
        GoldCall(name="rm", arguments={"file_name": "big.txt"}),
    ]


async def test_a_hostile_call_leaves_the_server_answering(tmp_path: Path) -> None:
    """While one session of ``envhub serve`` sends the issue's ``round_number`` and then
    a sort that runs past the 0.5 s tool timeout, ``/health`` keeps answering (a liveness
    bound, generous: it answers every 50 ms). The first call is refused where it enters,
    the sort is killed (a timeout error observation), and the episode, which removes the
    file and goes on with the task's gold calls, is scored by BFCL's checker: right."""
    env = envhub.make("bfcl", categories="base")
    task = env.tasks.get("multi_turn_base_15")  # the file system and MathAPI
    calls = [HOSTILE_ROUND, *_big_file_calls(2_000_000), *task.gold_actions]
    # a remote environment publishes no gold data: the runner gets the task from here
    hostile = task.model_copy(update={"gold_actions": calls})
    serve = ("--tool-timeout", "0.5", "--max-body-bytes", str(32 << 20))
    with (
        serve_in_subprocess("bfcl", "--env-arg", "categories=base", *serve) as url,
        _longest_health_gap(url, tmp_path) as longest,
    ):
        async with RemoteEnvironment(url, "bfcl", transport="http") as remote:
            trajectory = await EpisodeRunner(
                remote, ReferencePolicy(), max_env_attempts=1, task_of=lambda _: hostile
            ).run(EpisodeSpec(task_id=task.id, sample_index=0, group_id="hostile"))
    assert longest[0] < 2.0, f"/health did not answer for {longest[0]:.1f}s"
    tools = [str(m["content"]) for m in trajectory.messages if m["role"] == "tool"]
    assert len(tools) > 4, (trajectory.error, [t[:200] for t in tools])
    assert "out of range" in tools[0], tools[0]
    assert "timed out" in tools[3], tools[3][:200]
    assert "removed" in tools[4], tools[4]
    assert not trajectory.masked and trajectory.reward == 1.0, trajectory.error


async def test_a_call_past_its_timeout_is_killed_and_the_episode_keeps_its_state() -> None:
    """Sorting a 20 MB file of three million lines takes seconds, past a 0.75 s tool
    timeout: the call is killed (a timeout error observation) and the next call finds the
    file system as the calls before the killed one left it."""
    lines = 3_000_000
    touch, echo, sort, _ = _big_file_calls(lines)
    env = envhub.make("bfcl", categories="base", tool_timeout_s=0.75)
    session = await env.open("multi_turn_base_0")  # the file system only
    await session.reset()
    for call in (touch, echo):
        [observation] = (await call_tool(session, call.name, **call.arguments)).observations
        assert not observation.is_error, observation
    [killed] = (await call_tool(session, sort.name, **sort.arguments)).observations
    assert killed.is_error and "timed out" in killed.content, killed
    [counted] = (await call_tool(session, "wc", file_name="big.txt", mode="l")).observations
    assert not counted.is_error and f'"count": {lines}' in counted.content, counted
    closed = await session.close()
    assert closed.reward == 0.0 and closed.info["error_type"].startswith("multi_turn:")


def test_an_episode_keeps_its_backends_when_another_event_loop_ends() -> None:
    """Episodes run on many event loops (a rollout's threads, a test's own loop): the
    worker processes of one do not die with another. Loop A starts an episode (and so
    the worker processes' zygote), loop B starts one, A ends; B's calls still run on the
    state its calls made."""
    env = envhub.make("bfcl", categories="base")
    loop_a, loop_b = asyncio.new_event_loop(), asyncio.new_event_loop()

    async def started() -> SessionHandle:
        session = await env.open("multi_turn_base_0")  # the file system only
        await session.reset()
        return session

    async def ran(session: SessionHandle, tool: str, **arguments: object) -> Observation:
        [observation] = (await call_tool(session, tool, **arguments)).observations
        return observation

    try:
        episode_a = loop_a.run_until_complete(started())
        episode_b = loop_b.run_until_complete(started())
        made = loop_b.run_until_complete(ran(episode_b, "touch", file_name="kept.txt"))
        assert not made.is_error, made
        loop_a.run_until_complete(episode_a.close())
        loop_a.run_until_complete(loop_a.shutdown_default_executor())
        loop_a.close()
        time.sleep(0.5)  # what would die with loop A's thread has died by now
        listed = loop_b.run_until_complete(ran(episode_b, "ls"))
        assert not listed.is_error and "kept.txt" in listed.content, listed
        loop_b.run_until_complete(episode_b.close())
    finally:
        for loop in (loop_a, loop_b):
            if not loop.is_closed():
                loop.run_until_complete(loop.shutdown_default_executor())
                loop.close()
