"""Forks beyond the conformance suite's fork check: a non-deterministic environment is
caught by the replay check on every transport, a fork counts against the server's
capacity, children of a pooled session stay on its replica, and a child inherits the
budgets its parent used (turns and the episode's deadline)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Literal

import pytest

import envhub
from envhub import Environment, tool
from envhub.clients.pooled import PooledEnvironment
from envhub.clients.remote import RemoteEnvironment
from envhub.errors import CapacityError, NotDeterministic
from envhub.protocol import EnvironmentClient
from envhub.server import create_app
from envhub.testing import serve_in_thread
from envhub.types import ToolCall


class DiceEnv(Environment):
    """A tool whose answer is random: no replay can reproduce an episode that used it."""

    name = "dice"

    @tool
    async def roll(self) -> str:
        """Roll a die with a billion faces."""
        return str(random.randrange(10**9))

    @tool
    async def echo(self, text: str) -> str:
        """Say ``text`` back.

        Args:
            text: Anything.
        """
        return text

    def reward(self) -> float:
        return 0.0


def _call(name: str, **arguments: str) -> ToolCall:
    return ToolCall(id=f"c-{name}", name=name, arguments=arguments)


@pytest.fixture(scope="module")
def server_urls() -> Iterator[list[str]]:
    """Two servers hosting dice and calc, of three sessions each."""
    with (
        serve_in_thread(
            create_app({"dice": envhub.make(DiceEnv), "calc": envhub.make("calc")}, max_sessions=3)
        ) as first,
        serve_in_thread(create_app({"calc": envhub.make("calc")}, max_sessions=3)) as second,
    ):
        yield [first, second]


Transport = Literal["local", "http", "ws"]


def _client(transport: Transport, urls: list[str], env: str) -> EnvironmentClient:
    if transport == "local":
        return envhub.make(DiceEnv) if env == "dice" else envhub.make(env)
    return RemoteEnvironment(urls[0], env, transport=transport)


@pytest.mark.parametrize("transport", ["local", "http", "ws"])
async def test_a_random_tool_fails_the_fork_with_the_typed_error(
    transport: Transport, server_urls: list[str]
) -> None:
    client = _client(transport, server_urls, "dice")
    try:
        async with client.open() as session:
            await session.step([_call("echo", text="deterministic")])
            (child,) = await session.fork(1)  # a replay of echo reproduces it
            await child.abort()
            await session.step([_call("roll")])
            with pytest.raises(NotDeterministic, match="dice is not deterministic") as refused:
                await session.fork(2)
            if transport != "local":
                assert getattr(refused.value, "status", None) == 409
            assert (await session.step([_call("echo", text="after")])).observations[
                0
            ].content == "after"  # the parent is untouched
            assert (await session.info()).metrics.turns == 3
    finally:
        await client.aclose()


@pytest.mark.parametrize("transport", ["http", "ws"])
async def test_a_fork_past_the_servers_capacity_is_refused(
    transport: Transport, server_urls: list[str]
) -> None:
    client = _client(transport, server_urls, "calc")
    try:
        async with client.open() as session:
            with pytest.raises(CapacityError, match="maximum of 3 sessions") as refused:
                await session.fork(3)
            assert getattr(refused.value, "status", None) == 429
            children = await session.fork(2)  # what fits is made
            with pytest.raises(CapacityError):
                await children[0].fork(1)
            for child in children:
                await child.close()
    finally:
        await client.aclose()


async def test_children_of_a_pooled_session_live_on_its_replica(
    server_urls: list[str],
) -> None:
    pool = PooledEnvironment(server_urls, "calc", seed=0)
    try:
        sessions = [await pool.open() for _ in range(2)]
        for session in sessions:
            await session.step([_call("calculate", expression="6*7")])
            children = await session.fork(2)
            assert {child.served_by for child in children} == {session.served_by}
            for child in children:
                result = await child.step([_call("calculate", expression="1+1")])
                assert result.observations[0].content == "2"
                await child.close()
            await session.close()
    finally:
        await pool.aclose()


async def test_a_child_inherits_the_turns_and_deadline_its_parent_used() -> None:
    env = envhub.make("calc", max_turns=3)
    async with env.open((await env.task_ids())[0]) as session:
        for _ in range(2):
            await session.step([_call("calculate", expression="1+1")])
        (child,) = await session.fork()
        result = await child.step([_call("calculate", expression="2+2")])
        assert result.done and result.stop_reason == "max_turns"
        assert (await child.close()).metrics.turns == 3
        assert not (await session.info()).done  # the parent's own budget is its own


async def test_a_logged_sessions_children_log_on_from_its_log() -> None:
    from envhub.agents.session_log import LoggedSession

    env = envhub.make("calc")
    async with env.open((await env.task_ids())[0]) as inner:
        logged = LoggedSession(inner, lambda: 0)
        await logged.step([_call("calculate", expression="1+1")])
        first, second = await logged.fork(2)
        await first.step([_call("calculate", expression="2+2")])
        assert [c.observation.content for c in first.calls] == ["2", "4"]
        assert [c.observation.content for c in second.calls] == ["2"]
        assert [c.observation.content for c in logged.calls] == ["2"]
        for child in (first, second):
            await child.abort()
