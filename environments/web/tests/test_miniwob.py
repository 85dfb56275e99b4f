"""MiniWoB++ pages from the miniwob wheel, served locally and driven in Chromium."""

from __future__ import annotations

import pytest

import envhub
from envhub.testing import check_environment
from envhub.types import ToolCall

pytestmark = pytest.mark.chromium

#: a CI-sized sample covering clicks, forms, selects, dates and multi-step reveals
SAMPLE_TYPES = [
    "click-button",
    "click-checkboxes",
    "choose-list",
    "enter-text",
    "login-user",
    "click-tab-2",
    "click-collapsible",
    "enter-date",
    "enter-time",
    "simple-algebra",
]


def test_task_file_covers_at_least_twenty_types() -> None:
    env = envhub.make("miniwob")
    types = {t.metadata["task"] for t in env.tasks}
    assert len(types) >= 20
    assert all(t.gold_actions and t.gold_actions[-1].name == "finish" for t in env.tasks)


def test_gold_actions_score_one_on_a_sample() -> None:
    env = envhub.make("miniwob")
    ids = [next(t.id for t in env.tasks if t.metadata["task"] == name) for name in SAMPLE_TYPES]
    report = check_environment(env, task_ids=ids, concurrency=4)
    assert report.checked == len(SAMPLE_TYPES) and report.ok


async def test_reward_is_read_from_the_page() -> None:
    env = envhub.make("miniwob")
    task = next(t for t in env.tasks if t.metadata["task"] == "click-test-2")
    right = task.gold_actions[0].arguments["bid"]
    session = await env.open(task.id)
    page = session._start.messages[-1]["content"]  # type: ignore[union-attr]
    wrong = next(
        line.split("]")[0][1:]
        for line in page.splitlines()
        if line.endswith('button "ONE"') or line.endswith('button "TWO"')
        if not line.startswith(f"[{right}]")
    )
    result = await session.step([ToolCall(id="wrong", name="click", arguments={"bid": wrong})])
    assert "The task has ended" in result.observations[0].content
    closed = await session.close()
    assert closed.reward == 0.0 and closed.components["raw"] == -1.0


def test_miniwob_refuses_text_mode() -> None:
    with pytest.raises(envhub.EnvhubError, match="needs mode='browser'"):
        envhub.make("miniwob", mode="text")
