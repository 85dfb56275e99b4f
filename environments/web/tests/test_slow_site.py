"""The environment's own site is part of the environment: a page of it that does not load
in time is an infrastructure failure, so the rollout engine masks the episode and runs it
again, and never scores it. A navigation or an action the model got wrong is its outcome:
an error observation in a scored episode.

The site is made slow with real components, right after each episode has started (the
start page loaded): in text mode the site's own event loop (uvicorn on the web runtime)
is held busy, as on a machine too loaded to give it time; in browser mode Chromium's
network emulation delays every answer of the site. A page slower than an action's
timeout but within the page-load timeout is no failure at all: the model's click waits
for it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from envhub_web.runtime import runtime

import envhub
from envhub.protocol import EnvironmentClient, SessionHandle
from envhub.task import GoldCall
from envhub.testing import replay_calls
from envhub.trajectory import Trajectory

#: the operator's page-load timeout in the slow-site episodes
NAV_TIMEOUT_S = 1.0
#: how long the site stays unanswering: past every timeout of a tool call (the 5 s action
#: timeout and ``NAV_TIMEOUT_S``), within the session's tool timeout
SLOW_S = 8.0
#: an answer slower than the 5 s a click waits for its element, within the default
#: page-load timeout (``envhub_web.tab.NAV_TIMEOUT_S``)
SLOWER_THAN_AN_ACTION_S = 6.0
SHOP_TASK = "minishop-0-00004"

SlowDown = Callable[[SessionHandle], Awaitable[None]]


class SlowSiteAfterStart:
    """The environment as the rollout engine sees it, with ``slow_down(session)`` applied
    right after each episode's start (so the episode starts, and its next page is slow)."""

    def __init__(self, env: EnvironmentClient, slow_down: SlowDown) -> None:
        self._env, self._slow_down = env, slow_down

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    async def open(self, task_id: str | None = None, **kwargs: Any) -> SessionHandle:
        session = await self._env.open(task_id, **kwargs)
        await self._slow_down(session)
        return session


async def hold_the_site_loop(session: SessionHandle) -> None:
    """The site's event loop (shared by every site of the process) does nothing else for
    ``SLOW_S``: its pages answer late, as on a machine too loaded to run it."""
    runtime().loop.call_soon_threadsafe(time.sleep, SLOW_S)


def delay_the_network(seconds: float) -> SlowDown:
    """Every answer of the site reaches the episode's Chromium page ``seconds`` late."""

    async def slow_down(session: SessionHandle) -> None:
        tab = session.env.tab  # type: ignore[attr-defined]

        async def emulate() -> None:
            cdp = await tab._context.new_cdp_session(tab._page)
            await cdp.send("Network.enable")
            await cdp.send(
                "Network.emulateNetworkConditions",
                {
                    "offline": False,
                    "latency": seconds * 1000,
                    "downloadThroughput": -1,
                    "uploadThroughput": -1,
                },
            )

        await runtime().run(emulate())

    return slow_down


def assert_masked_as_infrastructure(trajectory: Trajectory) -> None:
    assert trajectory.masked, (trajectory.reward, trajectory.metrics)
    assert trajectory.metrics.episode_attempts == 2
    assert trajectory.metrics.retried_errors == {"sandbox_error": 1}
    assert trajectory.error is not None and trajectory.error.kind == "sandbox_error"
    assert "did not load" in trajectory.error.message, trajectory.error.message


def assert_scored(trajectory: Trajectory, reward: float, tool_errors: int) -> None:
    assert not trajectory.masked, trajectory.error
    assert trajectory.metrics.episode_attempts == 1
    assert trajectory.reward == reward
    assert trajectory.metrics.tool_errors == tool_errors


@pytest.mark.parametrize(
    ("mode", "slow_down"),
    [
        ("text", hold_the_site_loop),
        pytest.param("browser", delay_the_network(SLOW_S), marks=pytest.mark.chromium),
    ],
)
async def test_a_shop_page_that_does_not_load_masks_and_retries_the_episode(
    mode: str, slow_down: SlowDown
) -> None:
    env = envhub.make("web", mode=mode, nav_timeout_s=NAV_TIMEOUT_S)
    task = await env.task(SHOP_TASK)
    slow = SlowSiteAfterStart(env, slow_down)
    trajectory = await replay_calls(slow, SHOP_TASK, task.gold_actions, max_env_attempts=2)
    assert_masked_as_infrastructure(trajectory)


@pytest.mark.chromium
async def test_a_miniwob_page_that_does_not_load_masks_and_retries_the_episode() -> None:
    env = envhub.make("miniwob", nav_timeout_s=NAV_TIMEOUT_S)
    task = next(t for t in env.tasks if t.metadata["task"] == "click-collapsible")
    another = GoldCall(name="goto", arguments={"url": "/miniwob/miniwob/click-test-2.html"})
    slow = SlowSiteAfterStart(env, delay_the_network(SLOW_S))
    trajectory = await replay_calls(slow, task.id, [another], max_env_attempts=2)
    assert_masked_as_infrastructure(trajectory)


@pytest.mark.chromium
async def test_a_page_slower_than_an_action_timeout_is_waited_for() -> None:
    """A click that opens a page waits for it as long as a page may take to load (the
    operator's ``nav_timeout_s``), not only the action timeout its element has."""
    env = envhub.make("web", mode="browser")
    task = await env.task(SHOP_TASK)
    slow = SlowSiteAfterStart(env, delay_the_network(SLOWER_THAN_AN_ACTION_S))
    trajectory = await replay_calls(slow, SHOP_TASK, task.gold_actions, max_env_attempts=2)
    assert_scored(trajectory, reward=1.0, tool_errors=0)


@pytest.mark.parametrize("mode", ["text", pytest.param("browser", marks=pytest.mark.chromium)])
async def test_the_models_bad_navigations_are_scored(mode: str) -> None:
    env = envhub.make("web", mode=mode)
    task = await env.task(SHOP_TASK)
    mistakes = [
        GoldCall(name="click", arguments={"bid": "no-such-element"}),
        GoldCall(name="goto", arguments={"url": "http://127.0.0.1:99999/"}),
        GoldCall(name="goto", arguments={"url": "/no-such-page"}),  # the site's 404 page
        GoldCall(name="goto", arguments={"url": "/"}),
    ]
    trajectory = await replay_calls(env, SHOP_TASK, [*mistakes, *task.gold_actions])
    assert_scored(trajectory, reward=1.0, tool_errors=2)


@pytest.mark.chromium
async def test_clicking_what_cannot_be_clicked_is_scored() -> None:
    """A click that times out on a hidden element is the model's doing (no page of the
    site was loading): an error observation, the episode scored."""
    env = envhub.make("miniwob")
    task = next(t for t in env.tasks if t.id == "miniwob.click-collapsible.0")
    mistakes = [
        GoldCall(name="click", arguments={"bid": "no-such-element"}),
        GoldCall(name="click", arguments={"bid": "9"}),  # inside the collapsed section
    ]
    trajectory = await replay_calls(env, task.id, [*mistakes, *task.gold_actions])
    assert_scored(trajectory, reward=1.0, tool_errors=2)
