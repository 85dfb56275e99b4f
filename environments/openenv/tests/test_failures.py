"""Whose failure is it: an OpenEnv server killed mid-rollout (a dropped WebSocket, a dead
server) masks the episodes it was running, never scores them 0, and the retries get a
new server where envhub runs it; a server that cannot start or cannot be reached is
infrastructure too.

This module kills the shared ``guess`` server: it runs after test_bridge.py, and the
server it leaves dead is restarted by whatever needs it next.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
from pathlib import Path

import pytest
from envhub_openenv.servers import CommandServer, base_url

import envhub
from envhub import ToolCall
from envhub._util.net import free_port
from envhub.errors import SandboxError
from envhub.policies.base import Completion, GenerateRequest

GUESS_TASKS = Path(__file__).resolve().with_name("guess.jsonl")


def _guess_servers() -> list[int]:
    """Live child processes of this test process serving ``guess``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (int(fields[1]) == os.getpid() and fields[0] != "Z"
                and any(a.endswith(b"openenv_servers.py") for a in cmdline)
                and b"guess" in cmdline):
            found.append(int(entry.name))
    return found


class KillTheServerOnce:
    """Guesses 50, then the secret number; before the first episode's second guess, once
    ``episodes`` episodes are under way, it kills the guess server (SIGKILL): every
    episode in flight loses its socket."""

    model = "kill-server"

    def __init__(self, episodes: int) -> None:
        self.episodes = episodes  # how many episodes must be under way before the kill
        self.started: set[str] = set()
        self.all_started = asyncio.Event()
        self.killed: list[int] = []

    async def generate(self, request: GenerateRequest) -> Completion:
        if request.turn == 0:
            self.started.add(request.task_id)
            if len(self.started) == self.episodes:
                self.all_started.set()
        if request.turn == 1 and not self.killed:
            await self.all_started.wait()
            self.killed = _guess_servers()
            assert len(self.killed) == 1, self.killed
            os.kill(self.killed[0], signal.SIGKILL)
            for _ in range(1000):  # until the kernel has it
                if not _guess_servers():
                    break
                await asyncio.sleep(0.01)
        seed = int(request.task_id.split("-")[1])
        number = 50 if request.turn == 0 else random.Random(seed).randrange(100)
        call = ToolCall(id=f"call-{request.turn}", name="step", arguments={"number": number})
        return Completion(content=None, tool_calls=[call], finish_reason="tool_calls")

    async def aclose(self) -> None:
        """Holds nothing."""


async def test_a_killed_server_masks_and_retries_its_episodes(
    guess_command: list[str],
) -> None:
    """Both episodes are in flight when the server dies: each attempt is masked and
    retried, and the retries run on the server the bridge starts again."""
    env = envhub.make("openenv", command=guess_command, tasks=str(GUESS_TASKS))
    policy = KillTheServerOnce(episodes=2)
    result = await envhub.rollout.run(env, policy, ["guess-1", "guess-2"], concurrency=2,
                                      max_env_attempts=2, max_masked_fraction=None)
    assert policy.killed and _guess_servers() and _guess_servers() != policy.killed
    assert result.trajectories is not None
    for trajectory in result.trajectories:
        assert not trajectory.masked
        assert trajectory.metrics.episode_attempts == 2
        assert trajectory.metrics.retried_errors == {"sandbox_error": 1}
        seed = int(trajectory.task_id.split("-")[1])
        step = 0.2 * (1 - abs(50 - random.Random(seed).randrange(100)) / 100)
        assert trajectory.reward == pytest.approx(step + 1.0)
        assert trajectory.stop_reason == "env:done"


async def test_a_dropped_socket_masks_the_episode(guess_command: list[str]) -> None:
    """A server at a URL (envhub does not run it) killed mid-episode: masked with the
    reason, no reward, in one attempt."""
    url = await asyncio.to_thread(base_url, CommandServer(tuple(guess_command)), 120.0)
    env = envhub.make("openenv", url=url, tasks=str(GUESS_TASKS))
    result = await envhub.rollout.run(env, KillTheServerOnce(episodes=1), ["guess-3"],
                                      max_env_attempts=1, max_masked_fraction=None)
    assert result.trajectories is not None
    [trajectory] = result.trajectories
    assert trajectory.masked and trajectory.reward is None
    assert trajectory.error is not None and trajectory.error.kind == "sandbox_error"
    assert "is gone" in trajectory.error.message


async def test_a_server_that_cannot_start_or_be_reached_is_infrastructure() -> None:
    crash = [sys.executable, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)",
             "{port}"]
    env = envhub.make("openenv", command=crash, seeds=1)
    with pytest.raises(SandboxError, match="exited while starting; its output ends: boom"):
        await env.open("seed-0")
    env = envhub.make("openenv", url=f"http://127.0.0.1:{free_port()}", seeds=1)
    with pytest.raises(SandboxError, match=r"Connection refused|ConnectError"):
        await env.open("seed-0")
