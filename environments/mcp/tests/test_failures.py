"""Whose failure is it: a server that dies or cannot start is infrastructure (the episode
is masked, never scored 0); a hanging call meets the tool timeout and the episode goes
on; a tool error or a malformed call is an error observation the model reads.

Real servers throughout: ``mcp-server-git`` (killed mid-episode) and ``slow_server.py``,
written with the official SDK, over stdio and over Streamable HTTP.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import envhub
from envhub import ToolCall
from envhub.errors import NotDeterministic, SandboxError
from envhub.policies.base import Completion, GenerateRequest
from envhub.policies.reference import ReferencePolicy
from envhub.testing import call_tool, check_environment, serve_in_thread

SLOW_SERVER = Path(__file__).with_name("slow_server.py")


def _children_running(module: str) -> list[int]:
    """Live child processes of this test process whose command line names ``module``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        state, ppid = fields[0], int(fields[1])
        if ppid == os.getpid() and state != "Z" and module.encode() in cmdline:
            found.append(int(entry.name))
    return found


class KillServerThenCall:
    """A scripted policy: before its first call it kills the episode's git server."""

    model = "kill-server"

    def __init__(self) -> None:
        self.killed: list[int] = []

    async def generate(self, request: GenerateRequest) -> Completion:
        if request.turn > 0:
            return Completion(content="", tool_calls=[], finish_reason="stop")
        pids = _children_running("mcp_server_git")
        assert len(pids) == 1, pids
        os.kill(pids[0], signal.SIGKILL)
        for _ in range(1000):  # until the kernel has it (the SDK reaps it)
            if not _children_running("mcp_server_git"):
                break
            await asyncio.sleep(0.01)
        self.killed += pids
        call = ToolCall(id="call-1", name="git_log", arguments={"repo_path": "."})
        return Completion(content=None, tool_calls=[call], finish_reason="tool_calls")

    async def aclose(self) -> None:
        """Holds nothing."""


async def test_server_killed_mid_episode_masks_the_episode() -> None:
    env = envhub.make("mcp", task_set="git-history")
    policy = KillServerThenCall()
    try:
        result = await envhub.rollout.run(
            env, policy, ["git-history-01"], max_env_attempts=1, max_masked_fraction=None
        )
    finally:
        await env.aclose()
    assert policy.killed
    assert result.trajectories is not None
    [trajectory] = result.trajectories
    assert trajectory.masked and trajectory.reward is None
    assert trajectory.error is not None
    assert trajectory.error.kind == "sandbox_error", trajectory.error
    assert "is gone" in trajectory.error.message


@pytest.mark.usefixtures("earlier_clients_freed")
async def test_a_dead_shared_server_is_infrastructure_and_the_next_episode_gets_a_new_one(
) -> None:
    """time-zones shares one server per process: killed, the episode in flight meets a
    SandboxError (what the rollout masks, as above) and the next episode starts a new
    server instead of failing too."""
    env = envhub.make("mcp", task_set="time-zones")
    try:
        first = await envhub.rollout.run(env, ReferencePolicy(), ["time-zones-01"])
        [old] = _children_running("mcp_server_time")
        async with env.open("time-zones-02") as session:
            os.kill(old, signal.SIGKILL)
            with pytest.raises(SandboxError, match="is gone"):
                await call_tool(session, "convert_time", source_timezone="UTC", time="10:00",
                                target_timezone="Asia/Tokyo")
        second = await envhub.rollout.run(env, ReferencePolicy(), ["time-zones-02"])
        [new] = _children_running("mcp_server_time")
    finally:
        await env.aclose()
    assert new != old
    assert first.trajectories and second.trajectories
    assert [t.reward for t in first.trajectories + second.trajectories] == [1.0, 1.0]
    assert not _children_running("mcp_server_time")  # aclose_shared stopped it


@pytest.fixture
def tasks_file(tmp_path: Path) -> Path:
    """A user's task file for slow_server.py, as an operator would write one."""
    path = tmp_path / "tasks.jsonl"
    row: dict[str, Any] = {
        "id": "count-1",
        "prompt": [{"role": "user", "content": "How many words are in 'to be or not'?"}],
        "answer": "4",
        "gold_actions": [
            {"name": "word_count", "arguments": {"text": "to be or not"}},
            {"name": "answer", "arguments": {"value": "4"}},
        ],
        "metadata": {"reward": "numeric"},
    }
    path.write_text(json.dumps(row) + "\n")
    return path


def _slow(tasks_file: Path, **options: Any) -> envhub.LocalEnvironment:
    return envhub.make(
        "mcp", command=[sys.executable, str(SLOW_SERVER)], tasks=str(tasks_file), **options
    )


def test_a_users_server_and_task_file_pass_check(tasks_file: Path) -> None:
    check_environment(_slow(tasks_file))


async def test_hanging_call_meets_the_tool_timeout_and_the_episode_goes_on(
    tasks_file: Path,
) -> None:
    env = _slow(tasks_file, tool_timeout_s=1.0)
    try:
        async with env.open("count-1") as session:
            hung = await call_tool(session, "hang")
            [obs] = hung.observations
            assert obs.is_error and "hang timed out after 1.0s" in obs.content
            assert not hung.done
            echoed = await call_tool(session, "echo", text="still here")
            assert echoed.observations[0].content == "still here"
            await call_tool(session, "answer", value="4")
            result = await session.close()
    finally:
        await env.aclose()
    assert result.reward == 1.0
    assert result.metrics.tool_errors == 1


async def test_tool_errors_and_bad_calls_are_the_models(tasks_file: Path) -> None:
    env = _slow(tasks_file)
    try:
        async with env.open("count-1") as session:
            failed = (await call_tool(session, "fail", reason="because")).observations[0]
            assert failed.is_error and "failed on purpose: because" in failed.content
            missing = (await call_tool(session, "echo")).observations[0]
            assert missing.is_error and "invalid arguments for echo" in missing.content
            typed = (await call_tool(session, "echo", text=["a list"])).observations[0]
            assert typed.is_error and "is not of type 'string'" in typed.content
            step = await call_tool(session, "echo", text="ok")
            assert step.observations[0].content == "ok" and not step.done
            result = await session.close()
    finally:
        await env.aclose()
    assert result.reward == 0.0  # never answered
    assert result.metrics.tool_errors == 3


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-c", "import sys; sys.exit(3)"], "failed to start"),
        (["-c", "import time; time.sleep(60)"], "did not start within 1s"),
    ],
)
async def test_a_server_that_cannot_start_is_a_sandbox_error(
    tasks_file: Path, argv: list[str], message: str
) -> None:
    env = envhub.make("mcp", command=[sys.executable, *argv], tasks=str(tasks_file),
                      startup_timeout_s=1)
    try:
        with pytest.raises(SandboxError, match=message):
            await env.open("count-1")
    finally:
        await env.aclose()


@pytest.fixture
def http_server() -> Iterator[str]:
    sys.path.insert(0, str(SLOW_SERVER.parent))
    try:
        from slow_server import create_server
    finally:
        sys.path.remove(str(SLOW_SERVER.parent))
    with serve_in_thread(create_server().streamable_http_app()) as base_url:
        yield f"{base_url}/mcp"


async def test_streamable_http_server(http_server: str, tasks_file: Path) -> None:
    env = envhub.make("mcp", url=http_server, tasks=str(tasks_file))
    try:
        async with env.open("count-1") as session:
            counted = await call_tool(session, "word_count", text="one two three")
            assert counted.observations[0].content == "3"
            await call_tool(session, "answer", value="4")
            assert (await session.close()).reward == 1.0
    finally:
        await env.aclose()


async def test_a_stateful_server_at_a_url_refuses_to_fork(
    http_server: str, tasks_file: Path
) -> None:
    """A server reached by URL keeps its own state: a replay would run the calls on it
    again, so the fork is refused up front; declared stateless, it forks by replay."""
    for shared, forks in ((False, False), (True, True)):
        env = envhub.make("mcp", url=http_server, tasks=str(tasks_file), shared_server=shared)
        try:
            async with env.open("count-1") as session:
                await call_tool(session, "word_count", text="one two three")
                if not forks:
                    with pytest.raises(NotDeterministic, match="reached by URL"):
                        await session.fork(1)
                    continue
                (child,) = await session.fork(1)
                counted = await call_tool(child, "word_count", text="a b")
                assert counted.observations[0].content == "2"
                assert (await child.info()).metrics.turns == 2
                await child.close()
        finally:
            await env.aclose()
