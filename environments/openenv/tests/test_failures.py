"""Whose failure is it: an OpenEnv server killed mid-rollout (a dropped WebSocket, a dead
server) masks the episodes it was running, never scores them 0, and the retries get a
new server where envhub runs it; a server that cannot start or cannot be reached is
infrastructure too.

This module kills the shared ``guess`` server once: it runs after test_bridge.py (on
the same xdist worker), and the bridge's restart is part of what it tests.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import uuid
from pathlib import Path

import pytest
from envhub_openenv import OpenEnvEnv
from typer.testing import CliRunner

import envhub
from envhub import ToolCall
from envhub._util.net import free_port
from envhub.cli._app import app
from envhub.errors import SandboxError
from envhub.policies.base import Completion, GenerateRequest
from envhub.sandboxes.docker import docker_available
from envhub.testing import call_tool
from environments.openenv.tests.processes import live_children

GUESS_TASKS = Path(__file__).resolve().with_name("guess.jsonl")


def _guess_servers() -> list[int]:
    """Live child processes of this test process serving ``guess``."""
    return live_children("openenv_servers.py", "guess")


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


async def test_a_killed_server_masks_and_retries_or_masks_its_episodes(
    guess_command: list[str], guess_url: str
) -> None:
    """One kill, three episodes in flight on the server: two of an environment whose
    server envhub runs (``command=``) are masked and retried on the server the bridge
    starts again; one of an environment at the same server's URL (envhub does not run
    it: its socket drops) is masked with the reason, no reward, in its one attempt."""
    policy = KillTheServerOnce(episodes=3)
    run = envhub.make("openenv", command=guess_command, tasks=str(GUESS_TASKS))
    reached = envhub.make("openenv", url=guess_url, tasks=str(GUESS_TASKS))
    retried, dropped = await asyncio.gather(
        envhub.rollout.run(run, policy, ["guess-1", "guess-2"], concurrency=2,
                           max_env_attempts=2, max_masked_fraction=None),
        envhub.rollout.run(reached, policy, ["guess-3"], max_env_attempts=1,
                           max_masked_fraction=None),
    )
    assert policy.killed and _guess_servers() and _guess_servers() != policy.killed
    assert retried.trajectories is not None and len(retried.trajectories) == 2
    for trajectory in retried.trajectories:
        assert not trajectory.masked
        assert trajectory.metrics.episode_attempts == 2
        assert trajectory.metrics.retried_errors == {"sandbox_error": 1}
        seed = int(trajectory.task_id.split("-")[1])
        step = 0.2 * (1 - abs(50 - random.Random(seed).randrange(100)) / 100)
        assert trajectory.reward == pytest.approx(step + 1.0)
        assert trajectory.stop_reason == "env:done"
    assert dropped.trajectories is not None
    [trajectory] = dropped.trajectories
    assert trajectory.masked and trajectory.reward is None
    assert trajectory.error is not None and trajectory.error.kind == "sandbox_error"
    assert "is gone" in trajectory.error.message


async def test_closing_a_client_leaves_the_server_to_episodes_still_using_it(
    guess_command: list[str],
) -> None:
    """Closing one client while another is open leaves the shared server alone; the
    class's release (``aclose_shared``: a stopping ``envhub serve``) while an episode runs
    stops the server only when that episode ends (this test stops the guess server)."""
    env = envhub.make("openenv", command=guess_command, tasks=str(GUESS_TASKS))
    async with env.open("guess-1") as session:
        server = _guess_servers()
        await envhub.make("openenv", command=guess_command, tasks=str(GUESS_TASKS)).aclose()
        assert len(server) == 1 and _guess_servers() == server
        await OpenEnvEnv.aclose_shared()
        assert _guess_servers() == server
        right = await call_tool(session, "step", number=random.Random(1).randrange(100))
        assert right.done
        await session.close()
    assert not _guess_servers()


async def test_a_server_that_cannot_start_or_be_reached_is_infrastructure() -> None:
    crash = [sys.executable, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)",
             "{port}"]
    env = envhub.make("openenv", command=crash, seeds=1)
    with pytest.raises(SandboxError, match="exited while starting; its output ends: boom"):
        await env.open("seed-0")
    env = envhub.make("openenv", url=f"http://127.0.0.1:{free_port()}", seeds=1)
    with pytest.raises(SandboxError, match=r"Connection refused|ConnectError"):
        await env.open("seed-0")


def test_an_image_the_engine_lacks_is_a_one_line_error() -> None:
    """Refused when the environment is made, not masked episode by episode."""
    if not docker_available():
        if os.environ.get("ENVHUB_REQUIRE_DOCKER") == "1":
            pytest.fail("ENVHUB_REQUIRE_DOCKER=1 but no Docker engine")
        pytest.skip("needs a Docker engine")
    image = f"envhub-no-such-image-{uuid.uuid4().hex[:8]}:0"
    result = CliRunner().invoke(app, ["check", "openenv", "--env-arg", f"image={image}",
                                      "--env-arg", "seeds=1"])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0, result.output
    assert f"image={image!r} is not in the local Docker engine" in result.output
