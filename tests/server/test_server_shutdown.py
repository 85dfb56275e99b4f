"""Process-wide resources of an environment class (``Environment.aclose_shared``: warm
sandbox pools, browsers) are released when a server stops and by
``LocalEnvironment.aclose``; a signal-stopped server never runs ``atexit`` hooks, so
nothing else would release them. A real uvicorn server on 127.0.0.1."""

from __future__ import annotations

from typing import Any, ClassVar

import httpx

from envhub import Environment, GoldCall, LocalEnvironment, Reward, Task, TaskSet, tool
from envhub.server import create_app
from envhub.testing import check_environment, serve_in_thread


class PooledEnv(Environment):
    """Keeps a process-wide "pool" that its episodes draw from, like the SWE sandbox pools."""

    name = "pooled"
    pool: ClassVar[list[str]] = []
    released: ClassVar[int] = 0

    def load_tasks(self) -> TaskSet:
        prompt = [{"role": "user", "content": "go"}]
        return TaskSet([Task(id="t", prompt=prompt, gold_actions=[GoldCall(name="noop")])])

    async def reset(self, task: Task) -> list[dict[str, Any]]:
        PooledEnv.pool.append("warm")
        return await super().reset(task)

    @tool
    def noop(self) -> str:
        """Do nothing."""
        self.called = True
        return "ok"

    def reward(self) -> Reward:
        return Reward(value=float(getattr(self, "called", False)))

    @classmethod
    async def aclose_shared(cls) -> None:
        cls.pool.clear()
        cls.released += 1


def test_server_shutdown_releases_shared_resources_after_its_sessions() -> None:
    PooledEnv.pool.clear()
    before = PooledEnv.released
    with serve_in_thread(create_app({"pooled": LocalEnvironment(PooledEnv)})) as url:
        created = httpx.post(f"{url}/v1/sessions", json={"env": "pooled"})
        assert created.status_code == 200, created.text
        assert PooledEnv.pool == ["warm"] and PooledEnv.released == before
    assert PooledEnv.pool == [] and PooledEnv.released == before + 1


async def test_local_environment_aclose_releases_shared_resources() -> None:
    env = LocalEnvironment(PooledEnv)
    before = PooledEnv.released
    async with env.open("t") as session:
        await session.step([{"id": "1", "name": "noop", "arguments": "{}"}])
    await env.aclose()
    await env.aclose()  # idempotent
    assert PooledEnv.pool == [] and PooledEnv.released == before + 2


def test_check_environment_releases_what_it_made() -> None:
    """A plugin's test suite owns the environments ``check_environment`` makes for it."""
    before = PooledEnv.released
    check_environment(f"{__name__}:PooledEnv")
    assert PooledEnv.pool == [] and PooledEnv.released == before + 1
