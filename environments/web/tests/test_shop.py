"""The MiniShop environment end to end, in text mode and in a real Chromium."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from envhub_web.catalog import load_catalog
from envhub_web.pageview import format_observation, parse_html

import envhub
from envhub.errors import SandboxError
from envhub.testing import check_environment
from envhub.types import ToolCall

MODES = ["text", pytest.param("browser", marks=pytest.mark.chromium)]


@pytest.fixture(scope="module")
def hanging_url() -> Iterator[str]:
    """A 127.0.0.1 server that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}/slow"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_text_mode_check_passes_on_ci_subset() -> None:
    report = check_environment("web", mode="text", split="test", limit=50)
    assert report.checked == 50 and report.ok


@pytest.mark.chromium
def test_browser_mode_check_passes_on_ci_subset() -> None:
    report = check_environment("web", mode="browser", split="test", limit=10, concurrency=4)
    assert report.checked == 10 and report.ok


@pytest.mark.parametrize("mode", MODES)
async def test_bad_actions_are_readable_errors_and_the_episode_goes_on(
    mode: str, hanging_url: str
) -> None:
    env = envhub.make("web", mode=mode, nav_timeout_s=1.5)
    task = env.tasks.get("minishop-0-00004")
    session = await env.open(task.id)
    bad = [
        ("click", {"bid": "no-such-element"}, "no element with bid 'no-such-element'"),
        ("goto", {"url": "http://example.com/"}, "only pages of this site"),
        ("goto", {"url": "file:///etc/passwd"}, "only pages of this site"),
        ("goto", {"url": hanging_url}, "only pages of this site"),  # another port
        ("select_option", {"bid": "search-input", "value": "x"}, "not a select box"),
    ]
    for index, (name, arguments, expected) in enumerate(bad):
        result = await session.step([ToolCall(id=f"bad-{index}", name=name, arguments=arguments)])
        observation = result.observations[0]
        assert observation.is_error, observation.content
        assert expected in observation.content
        assert not result.done
    for index, call in enumerate(task.gold_actions):
        result = await session.step(
            [ToolCall(id=f"gold-{index}", name=call.name, arguments=call.arguments)]
        )
        assert not result.observations[0].is_error, result.observations[0].content
    closed = await session.close()
    assert closed.reward == 1.0
    assert closed.metrics.tool_errors == len(bad)


@pytest.mark.parametrize("mode", MODES)
async def test_wrong_purchase_gets_partial_reward(mode: str) -> None:
    env = envhub.make("web", mode=mode)
    catalog = load_catalog()
    task = next(
        t
        for t in env.tasks.split("test")
        if any(len(v) > 1 for v in catalog.by_asin[t.answer].options.values())
    )
    product = catalog.by_asin[task.answer]
    gold = [c.model_copy(deep=True) for c in task.gold_actions]
    option = next(
        c
        for c in gold
        if c.name == "select_option" and len(product.options[c.arguments["bid"][4:]]) > 1
    )
    values = product.options[option.arguments["bid"][4:]]
    option.arguments["value"] = next(v for v in values if v != option.arguments["value"])
    session = await env.open(task.id)
    for index, call in enumerate(gold):
        result = await session.step(
            [ToolCall(id=str(index), name=call.name, arguments=call.arguments)]
        )
        assert not result.observations[0].is_error
    closed = await session.close()
    goal = task.metadata["goal"]
    parts = len(goal["attributes"]) + len(goal["options"]) + 1
    assert closed.reward == pytest.approx((parts - 1) / parts)
    assert closed.components["success"] == 0.0


async def test_sessions_have_separate_state() -> None:
    env = envhub.make("web", mode="text")
    task = env.tasks.get("minishop-0-00002")
    first, second, third = [await env.open(task.id) for _ in range(3)]
    for session in (first, third):
        for index, call in enumerate(task.gold_actions):
            await session.step([ToolCall(id=str(index), name=call.name, arguments=call.arguments)])
    assert (await first.close()).reward == 1.0
    assert (await third.close()).reward == 1.0
    assert (await second.close()).reward == 0.0  # saw nothing of the other sessions' orders


@pytest.mark.chromium
async def test_text_and_browser_observations_agree() -> None:
    """observe.js (browser) and pageview.py (text) render every page type identically."""
    import httpx

    task_env = envhub.make("web", mode="browser")
    task = task_env.tasks.get("minishop-0-00003")
    session = await task_env.open(task.id)
    env = session.env
    pages = [await env.observe()]
    for index, call in enumerate(task.gold_actions[:-1]):
        result = await session.step(
            [ToolCall(id=str(index), name=call.name, arguments=call.arguments)]
        )
        pages.append(result.observations[0].content)
    await session.step([ToolCall(id="cart", name="goto", arguments={"url": "/cart"})])
    pages.append(await env.observe())
    cookies = {"minishop_session": env.token}
    async with httpx.AsyncClient(cookies=cookies, trust_env=False) as client:
        # pages whose form state is the server-rendered one: home, results, item, order, cart
        for browser_text in [pages[0], pages[2], pages[3], pages[-2], pages[-1]]:
            url = browser_text.splitlines()[0].removeprefix("URL: ")
            response = await client.get(url)
            page = parse_html(response.text, str(response.url))
            assert format_observation(page.url, page.title, page.lines()) == browser_text
    await session.close()


async def test_buying_without_options_shows_the_site_error() -> None:
    env = envhub.make("web", mode="text")
    task = env.tasks.get("minishop-0-00005")
    session = await env.open(task.id)
    for index, call in enumerate(task.gold_actions[:3]):
        await session.step([ToolCall(id=str(index), name=call.name, arguments=call.arguments)])
    result = await session.step([ToolCall(id="buy", name="click", arguments={"bid": "buy"})])
    assert "Please choose a" in result.observations[0].content
    assert (await session.close()).reward == 0.0


@pytest.mark.chromium
async def test_screenshots_are_saved_as_artifacts(tmp_path: Path) -> None:
    env = envhub.make("web", mode="browser", screenshot_dir=str(tmp_path))
    task = env.tasks.get("minishop-0-00006")
    session = await env.open(task.id)
    call = task.gold_actions[0]
    result = await session.step([ToolCall(id="0", name=call.name, arguments=call.arguments)])
    shots = await asyncio.to_thread(lambda: sorted(tmp_path.rglob("*.png")))
    assert len(shots) == 2 and shots[-1].read_bytes()[:4] == b"\x89PNG"
    assert str(shots[-1]) in result.observations[0].content
    await session.close()


@pytest.mark.chromium
async def test_a_dead_browser_is_an_infra_failure_not_a_tool_error() -> None:
    from envhub_web.runtime import runtime

    env = envhub.make("web", mode="browser")
    task = env.tasks.get("minishop-0-00007")
    session = await env.open(task.id)
    browser = session.env.tab._context.browser  # type: ignore[union-attr]
    await runtime().run(browser.close())
    with pytest.raises(SandboxError, match="browser of this episode is gone"):
        await session.step([ToolCall(id="0", name="click", arguments={"bid": "search-button"})])
    await session.abort()
    fresh = await env.open(task.id)  # the pool replaces the dead browser
    assert (await fresh.close()).reward == 0.0


async def test_cart_checkout_is_an_order_too() -> None:
    env = envhub.make("web", mode="text")
    task = env.tasks.get("minishop-0-00008")
    session = await env.open(task.id)
    calls = [c for c in task.gold_actions if c.arguments.get("bid") != "buy" and c.name != "finish"]
    calls += [
        envhub.GoldCall(name="click", arguments={"bid": "add-to-cart"}),
        envhub.GoldCall(name="click", arguments={"bid": "checkout"}),
    ]
    for index, call in enumerate(calls):
        result = await session.step(
            [ToolCall(id=str(index), name=call.name, arguments=call.arguments)]
        )
        assert not result.observations[0].is_error, result.observations[0].content
    assert "Thank you for your order" in result.observations[0].content
    assert (await session.close()).reward == 1.0
