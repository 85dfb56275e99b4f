"""``envhub.connect``, the one resolver: every form it takes reaches a working environment
(a plugin in-process, ``module:Class``, a class, a real ``envhub serve`` app on
127.0.0.1, two of them as a pool, a Ray address, a ready client), bad input is an
``InvalidRequest`` that names the fix, and the trainer and gymnasium adapters reach a
server through it."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from typing import Any

import gymnasium
import pytest

import envhub
from envhub import Budgets
from envhub.clients.pooled import PooledEnvironment
from envhub.clients.remote import RemoteEnvironment
from envhub.errors import FleetError, InvalidRequest, RegistryError, TaskNotFound
from envhub.gym import EnvhubGymEnv
from envhub.protocol import EnvironmentClient
from envhub.runtime.sync import run_sync
from envhub.testing import call_tool, serve_in_thread
from envhub.trainers.environments import resolve_environment
from tests.core.toy_envs import ToyEnv

pytest.importorskip("envhub.server", reason="the server extra is not installed")

TASK = "calc-0-00001"


@pytest.fixture(scope="module")
def servers() -> Iterator[list[str]]:
    """Two real ``envhub serve`` apps hosting calc (uvicorn on 127.0.0.1)."""
    from envhub.server import create_app

    with serve_in_thread(create_app(["calc"])) as first, \
            serve_in_thread(create_app(["calc"])) as second:  # fmt: skip
        yield [first, second]


async def _solve(client: EnvironmentClient, task_id: str = TASK) -> float:
    """Play ``task_id`` with its gold answer (read from the installed plugin): the reward."""
    gold = envhub.make("calc").tasks.get(task_id)
    async with client.open(task_id) as session:
        await call_tool(session, "answer", value=gold.answer)
        return (await session.close()).reward


async def test_a_plugin_name_runs_in_process_with_budgets_over_its_own() -> None:
    env = envhub.connect("calc", options={"num_tasks": 5}, budgets=Budgets(max_turns=2))
    assert isinstance(env, envhub.LocalEnvironment)
    info = await env.info()
    assert info.tasks == 5 and info.options == {"num_tasks": 5}
    # the field given replaces calc's; calc's own timeouts stay (not Budgets()' defaults)
    assert (info.budgets.max_turns, info.budgets.tool_timeout_s) == (2, 5.0)
    assert await _solve(env) == 1.0
    await env.aclose()


@pytest.mark.parametrize("where", ["tests.core.toy_envs:ToyEnv", ToyEnv])
async def test_module_class_ids_and_classes_run_in_process(where: Any) -> None:
    env = envhub.connect(where, options={"greeting": "hi"})
    assert isinstance(env, envhub.LocalEnvironment) and env.version == "1.2.3"
    async with env.open("toy-1") as session:
        assert (await session.reset()).messages[0]["content"] == "hi 1"
        assert (await call_tool(session, "finish", text="1")).done


@pytest.mark.parametrize("transport", ["ws", "http"])
async def test_one_url_is_that_server(servers: list[str], transport: Any) -> None:
    env = envhub.connect(servers[0], "calc", options={"num_tasks": 5}, transport=transport)
    assert isinstance(env, RemoteEnvironment) and env.transport == transport
    try:
        with pytest.raises(TaskNotFound):  # the options reach the server's sessions
            await env.open("calc-0-00007")
        async with env.open(TASK) as session:
            assert session.served_by == servers[0]
        assert await _solve(env) == 1.0
    finally:
        await env.aclose()


async def test_several_urls_are_a_pool_over_them(servers: list[str]) -> None:
    env = envhub.connect(servers, "calc")
    assert isinstance(env, PooledEnvironment)
    try:
        held = [await env.open(TASK) for _ in range(4)]  # open at once: spread by load
        assert {session.served_by for session in held} == set(servers)
        for session in held:
            await session.abort()
        assert await _solve(env) == 1.0
    finally:
        await env.aclose()


async def test_a_ready_client_comes_back_as_it_is() -> None:
    env = envhub.make("calc")
    assert envhub.connect(env) is env
    assert envhub.connect(env, options={}) is env  # an empty option set says nothing
    with pytest.raises(InvalidRequest, match="a ready client is used as it is"):
        envhub.connect(env, "calc", token="t")


@pytest.mark.parametrize(
    ("where", "kwargs", "says"),
    [
        (42, {}, "connect\\(\\) takes a plugin name"),
        ("http://127.0.0.1:9", {}, "say which one, connect\\('http://127.0.0.1:9', 'calc'\\)"),
        (["http://127.0.0.1:9", "http://127.0.0.1:10"], {}, "say which one"),
        ("http://127.0.0.1:9", {"env": "calc", "budgets": Budgets(max_turns=2)},
         "set by its server"),
        ("ftp://127.0.0.1:9", {"env": "calc"}, "not a server URL: 'ftp://127.0.0.1:9'"),
        (["http://127.0.0.1:9", "ray://127.0.0.1:6379"], {"env": "calc"}, "not a server URL"),
        ([], {"env": "calc"}, "empty list of server URLs"),
        (["http://127.0.0.1:9", "http://127.0.0.1:9/"], {"env": "calc"}, "listed twice"),
        ("calc", {"token": "t"}, "token= is for a server.*runs in-process"),
        ("calc", {"transport": "ws"}, "transport= is for a server"),
        ("calc", {"env": "sql"}, "names another environment than 'calc'.*drop env="),
        ("calc", {"namespace": "x"}, "namespace= is a Ray fleet's"),
        ("http://127.0.0.1:9", {"env": "calc", "transport": "grpc"}, "transport is \"ws\""),
    ],
)
def test_bad_input_is_refused_with_the_fix(where: Any, kwargs: dict[str, Any], says: str
                                           ) -> None:
    with pytest.raises(InvalidRequest, match=says):
        envhub.connect(where, **kwargs)
    with pytest.raises(RegistryError, match="no-such-plugin"):
        envhub.connect("no-such-plugin")


def test_a_ray_address_goes_to_the_fleet_client() -> None:
    """``ray://HOST:PORT`` is joined as a Ray fleet: with no cluster there, the fleet
    client's own bounded probe says so (the fleet tests cover a live cluster)."""
    if not os.environ.get("ENVHUB_REQUIRE_RAY"):
        pytest.importorskip("ray", reason="ray is not installed (pip install 'envhub-rl[ray]')")
    with socket.socket() as held:  # bound and not listening: a connection is refused
        held.bind(("127.0.0.1", 0))
        nowhere = f"127.0.0.1:{held.getsockname()[1]}"
        with pytest.raises(FleetError, match=f"no Ray cluster at {nowhere}"):
            envhub.connect(f"ray://{nowhere}", "calc", namespace="nobody")
        with pytest.raises(InvalidRequest, match="say which one"):
            envhub.connect(f"ray://{nowhere}")


async def test_the_trainer_adapters_reach_a_pool_and_keep_make_keywords(servers: list[str]
                                                                        ) -> None:
    pooled = resolve_environment(servers, env_name="calc")
    assert isinstance(pooled, PooledEnvironment)
    try:
        assert await _solve(pooled) == 1.0
    finally:
        await pooled.aclose()
    local = resolve_environment("calc", options={"num_tasks": 4}, max_turns=3, seed=1)
    info = await local.info()
    assert (info.budgets.max_turns, info.options) == (3, {"num_tasks": 4, "seed": 1})


def test_the_gym_adapter_plays_on_a_server(servers: list[str]) -> None:
    gold = envhub.make("calc").tasks.get(TASK)
    env = gymnasium.make("envhub/calc-v0", where=servers[1], transport="http")
    try:
        obs, info = env.reset(seed=0, options={"task_id": TASK})
        assert json.loads(obs)[-1]["role"] == "user" and info["task_id"] == TASK
        answer = {"tool_calls": [{"id": "1", "name": "answer",
                                  "arguments": json.dumps({"value": gold.answer})}]}  # fmt: skip
        _, reward, terminated, _, _ = env.step(json.dumps(answer))
        assert reward == 1.0 and terminated
        env.reset(seed=3)  # a task drawn from the server's ids
    finally:
        env.close()
    # a ready client is the caller's: the adapter plays on it and leaves it open
    client = envhub.connect(servers[0], "calc")
    adapter = EnvhubGymEnv(client)
    adapter.reset(seed=0, options={"task_id": TASK})
    adapter.close()
    adapter = EnvhubGymEnv(client)
    assert json.loads(adapter.reset(seed=0, options={"task_id": TASK})[0])
    adapter.close()
    run_sync(client.aclose())
    with pytest.raises(InvalidRequest, match="env names the hosted environment"):
        EnvhubGymEnv(ToyEnv, where=servers[0])
