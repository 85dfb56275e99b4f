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
from envhub.protocol import SessionHandle
from envhub.testing import call_tool, serve_in_subprocess
from envhub.types import Observation

#: the issue's call (item 4) took 13 s at -12,000,000 decimal places on the auditor's
#: machine and 7.6 s here; at -25,000,000 it would hold the loop past any liveness bound
HOSTILE_ROUND = GoldCall(
    name="round_number", arguments={"number": 5, "decimal_places": -25_000_000}
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


def _big_file_calls(lines: int, name: str = "big.txt") -> list[GoldCall]:
    """A file of ``lines`` distinct lines (hex numbers, shuffled) made, then sorted: the
    sort takes about 0.7 s a million lines here, the echo a sixth of that."""
    content = "\n".join(f"{i * 7919 % lines:x}" for i in range(lines))
    return [
        GoldCall(name="touch", arguments={"file_name": name}),
        GoldCall(name="echo", arguments={"content": content, "file_name": name}),
        GoldCall(name="sort", arguments={"file_name": name}),
    ]


async def _timeout_a_sort_exceeds(lines: int) -> float:
    """A tool timeout that sorting a file of ``lines`` lines exceeds 2.5 times over and
    making it does not, on this machine as loaded as it is now: a fixed timeout either
    lets a fast machine finish the sort or a loaded one time out the echo. Measured on an
    episode of its own, with no timeout to speak of; measured again (up to three times)
    when a burst of load on a busy CI machine slowed the echo alone."""
    env = envhub.make("bfcl", categories="base", tool_timeout_s=120)
    for _ in range(3):
        session = await env.open("multi_turn_base_0")
        await session.reset()
        took = []
        for call in _big_file_calls(lines):
            started = time.monotonic()
            [observation] = (await call_tool(session, call.name, **call.arguments)).observations
            took.append(time.monotonic() - started)
            assert not observation.is_error, observation.content[:200]
        await session.close()
        _, echo_s, sort_s = took
        if sort_s > 4 * echo_s:
            return sort_s / 2.5
    raise AssertionError(f"the sort ({sort_s:.2f}s) is too close to the echo ({echo_s:.2f}s)")


async def _set_up(session: SessionHandle, call: GoldCall, tries: int = 5) -> Observation:
    """One call that sets the scene, run again while it times out. These tests set tool
    timeouts a sort exceeds, and a machine loaded more than when it was measured can make
    a 20 MB echo exceed one too; a
    call that timed out changed nothing (its worker was killed, and the one replacing it
    replays only the calls that ran), so running it again is what a model would do."""
    for _ in range(tries):
        [observation] = (await call_tool(session, call.name, **call.arguments)).observations
        if "timed out" not in observation.content:
            assert not observation.is_error, observation
            return observation
    raise AssertionError(f"{call.name} timed out {tries} times")


async def test_a_hostile_call_leaves_the_server_answering(tmp_path: Path) -> None:
    """While a session of ``envhub serve`` sends the issue's ``round_number`` and then a
    sort that runs past the tool timeout, ``/health`` keeps answering, polled every
    50 ms from a process of its own. The bound is generous (5 s, for a loaded machine
    that schedules the server late; the issue's call held it 13 s). The first call is
    refused where it enters, the sort is killed (a timeout error observation), the
    episode goes on (the file is still there to remove), and it is scored by BFCL's
    checker, not masked."""
    touch, echo, sort = _big_file_calls(3_000_000)
    timeout = await _timeout_a_sort_exceeds(3_000_000)
    serve = ("--tool-timeout", f"{timeout:.3f}", "--max-body-bytes", str(32 << 20))
    with (
        serve_in_subprocess("bfcl", "--env-arg", "categories=base", *serve) as url,
        _longest_health_gap(url, tmp_path) as longest,
    ):
        async with RemoteEnvironment(url, "bfcl", transport="http") as remote:
            session = await remote.open("multi_turn_base_15")  # the file system and MathAPI
            await session.reset()
            round_call = await call_tool(session, HOSTILE_ROUND.name, **HOSTILE_ROUND.arguments)
            for call in (touch, echo):
                await _set_up(session, call)
            killed = await call_tool(session, sort.name, **sort.arguments)
            removed = await call_tool(session, "rm", file_name="big.txt")
            closed = await session.close()
    assert longest[0] < 5.0, f"/health did not answer for {longest[0]:.1f}s"
    [refused] = round_call.observations
    assert refused.is_error and "out of range" in refused.content, refused
    assert "timed out" in killed.observations[0].content, killed.observations[0].content[:200]
    assert "removed" in removed.observations[0].content, removed.observations[0]
    assert closed.reward == 0.0 and closed.info["error_type"].startswith("multi_turn:"), closed


async def test_a_call_past_its_timeout_is_killed_and_the_episode_keeps_its_state() -> None:
    """Sorting a 20 MB file of three million lines takes longer than the tool timeout:
    the call is killed (a timeout error observation) and the next call finds the
    file system as the calls before the killed one left it: four such files, whose
    replay in the replacement worker can take longer than one call may, and is not
    charged to one."""
    lines = 3_000_000
    names = [f"big{i}.txt" for i in range(4)]
    timeout = await _timeout_a_sort_exceeds(lines)
    env = envhub.make("bfcl", categories="base", tool_timeout_s=timeout)
    session = await env.open("multi_turn_base_0")  # the file system only
    await session.reset()
    for name in names:
        touch, echo, sort = _big_file_calls(lines, name)
        for call in (touch, echo):
            await _set_up(session, call)
    [killed] = (await call_tool(session, sort.name, file_name=names[0])).observations
    assert killed.is_error and "timed out" in killed.content, killed
    [counted] = (await call_tool(session, "wc", file_name=names[-1], mode="l")).observations
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
