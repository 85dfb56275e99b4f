"""``image=``: an OpenEnv server image (``adder``, built offline by conftest.py's
``adder_image``) run by the bridge with envhub's container policy: ``envhub check``
passes, a rollout has exact counts, and a container killed mid-episode masks that
episode (never a 0) while the next episode gets a new container.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import envhub
from envhub import ToolCall
from envhub.environment_images.run import CONTAINER_LABEL
from envhub.policies.base import Completion, GenerateRequest
from envhub.policies.openai_compat import OpenAIPolicy
from envhub.sandboxes.docker_cli import run_docker
from envhub.testing import call_tool
from environments.openenv.tests.processes import live_children
from tests.rollout.scripted_server import ScriptConfig

ADDER_TASKS = Path(__file__).resolve().with_name("adder.jsonl")


def _containers(image: str) -> list[str]:
    """The running containers of ``image`` that envhub started."""
    return run_docker("ps", "-q", "--filter", f"ancestor={image}",
                      "--filter", f"label={CONTAINER_LABEL}").stdout.split()


def test_envhub_check_passes_on_an_image(adder_image: str) -> None:
    """In its own process, which starts the container and stops it at exit."""
    proc = subprocess.run(
        [sys.executable, "-m", "envhub.cli", "check", "openenv", "--env-arg",
         f"image={adder_image}", "--env-arg", f"tasks={ADDER_TASKS}"],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ok: 2 tasks of openenv: reference scores 1, no-op scores 0" in proc.stderr


async def test_rollout_on_an_image_has_exact_counts(scripted, adder_image: str) -> None:
    """Per episode: ``add`` (2 + 3), ``fail`` (an error observation), ``submit`` 5: the
    server's ``done`` ends it, and its reward is 1 for ``add-0`` (2 + 3) and 0 for
    ``add-1`` (40 + 2)."""
    server = scripted(ScriptConfig(turns=[
        {"tool_calls": [{"name": "add", "arguments": '{"a": 2, "b": 3}'}]},
        {"tool_calls": [{"name": "fail", "arguments": '{"reason": "no"}'}]},
        {"tool_calls": [{"name": "submit", "arguments": '{"answer": "5"}'}]},
    ]))  # fmt: skip
    env = envhub.make("openenv", image=adder_image, tasks=str(ADDER_TASKS))
    policy = OpenAIPolicy("scripted", [server.base_url])
    try:
        result = await envhub.rollout.run(env, policy, group_size=2, concurrency=4)
    finally:
        await policy.aclose()
    assert result.trajectories is not None and len(result.trajectories) == 4
    assert server.stats.requests == 4 * 3
    for trajectory in result.trajectories:
        assert not trajectory.masked and trajectory.stop_reason == "env:done"
        metrics = trajectory.metrics
        assert (metrics.turns, metrics.tool_calls, metrics.tool_errors) == (3, 3, 1)
        assert trajectory.reward == (1.0 if trajectory.task_id == "add-0" else 0.0)
        observed = [m["content"] for m in trajectory.messages if m["role"] == "tool"]
        assert observed[0] == "5" and "failed on purpose: no" in observed[1]
    assert len(_containers(adder_image)) == 1  # one server for all episodes


class KillTheContainer:
    """``add`` on the first turn; before the second, ``docker kill`` of the container."""

    model = "kill-container"

    def __init__(self, image: str) -> None:
        self.image = image
        self.killed: list[str] = []

    async def generate(self, request: GenerateRequest) -> Completion:
        if request.turn == 1:
            self.killed = _containers(self.image)
            run_docker("kill", *self.killed, check=True)
            for _ in range(1000):  # until the bridge's docker run has seen it
                if not live_children("run", self.image):
                    break
                await asyncio.sleep(0.01)
        call = ToolCall(id=f"call-{request.turn}", name="add", arguments={"a": 1, "b": 2})
        return Completion(content=None, tool_calls=[call], finish_reason="tool_calls")

    async def aclose(self) -> None:
        """Holds nothing."""


async def test_a_killed_container_masks_its_episode(adder_image: str) -> None:
    env = envhub.make("openenv", image=adder_image, tasks=str(ADDER_TASKS))
    policy = KillTheContainer(adder_image)
    result = await envhub.rollout.run(env, policy, ["add-0"], max_env_attempts=1,
                                      max_masked_fraction=None)
    assert len(policy.killed) == 1
    assert result.trajectories is not None
    [trajectory] = result.trajectories
    assert trajectory.masked and trajectory.reward is None
    assert trajectory.error is not None and trajectory.error.kind == "sandbox_error"
    # the next episode gets a new container
    async with env.open("add-1") as session:
        assert (await call_tool(session, "add", a=40, b=2)).observations[0].content == "42"
        assert (await call_tool(session, "submit", answer="42")).done
        assert (await session.close()).reward == 1.0
    assert _containers(adder_image) and _containers(adder_image) != policy.killed

