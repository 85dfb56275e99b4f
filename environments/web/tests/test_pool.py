"""Browser pooling: contexts are fresh per episode, browsers are reused and never leak."""

from __future__ import annotations

import asyncio

import pytest
from envhub_web import shutdown
from envhub_web.pool import BrowserPool, find_chromium, get_pool
from envhub_web.procs import chromium_pids
from envhub_web.runtime import runtime

import envhub
from envhub.types import ToolCall

pytestmark = pytest.mark.chromium


async def test_episodes_share_a_browser_but_not_state() -> None:
    env = envhub.make("web", mode="browser")
    task = env.tasks.get("minishop-0-00004")
    pool = await get_pool(find_chromium() or "")
    launches = pool.launches
    first = await env.open(task.id)
    for index, call in enumerate(task.gold_actions[:3]):
        await first.step([ToolCall(id=str(index), name=call.name, arguments=call.arguments)])
    product_page = await first.step(
        [ToolCall(id="add", name="select_option", arguments=task.gold_actions[3].arguments)]
    )
    assert not product_page.observations[0].is_error
    await first.close()
    second = await env.open(task.id)
    start = second._start
    assert start is not None and 'link "Cart (0)"' in start.messages[-1]["content"]
    result = await second.step([ToolCall(id="back", name="go_back", arguments={})])
    assert result.observations[0].is_error  # a fresh context has no history of the first episode
    await second.close()
    assert pool.launches - launches <= 1  # both episodes ran in the pooled browser


async def test_idle_pool_closes_its_browsers() -> None:
    pool = BrowserPool(find_chromium() or "", linger_s=0.5)

    async def use_once() -> tuple[int, int]:
        context, _ = await pool.new_page("http://127.0.0.1:9")
        await asyncio.sleep(0.3)
        held = pool.in_use
        await pool.release(context)
        for _ in range(100):  # linger_s after the last release, the browser goes
            if not pool.browsers:
                break
            await asyncio.sleep(0.1)
        return held, pool.browsers

    try:
        assert await runtime().run(use_once()) == (1, 0)  # spares do not keep it alive
    finally:
        await runtime().run(pool.close())


def test_shutdown_stops_every_browser_and_the_next_session_restarts_them() -> None:
    async def one_episode() -> float:
        env = envhub.make("web", mode="browser")
        session = await env.open((await env.task_ids("test"))[0])
        assert chromium_pids()
        return (await session.close()).reward

    assert asyncio.run(one_episode()) == 0.0
    shutdown()
    assert not chromium_pids()
    assert asyncio.run(one_episode()) == 0.0
    shutdown()
    assert not chromium_pids()


async def test_fresh_browser_episodes_close_their_own_chromium() -> None:
    env = envhub.make("web", mode="browser", fresh_browser=True)
    before = chromium_pids()  # browsers of earlier tests in this process may still run
    session = await env.open((await env.task_ids("test"))[0])
    own = chromium_pids(outside=before) - before
    assert own
    await session.close()
    for _ in range(100):
        if not chromium_pids() & own:
            break
        await asyncio.sleep(0.1)
    assert not chromium_pids() & own
