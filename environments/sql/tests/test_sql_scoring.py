"""Gold SQL scores 1 on every shipped task; wrong and invalid submissions score 0 (or -1)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import envhub
from envhub import StepResult
from envhub.testing import check_environment

CallTool = Callable[..., Awaitable[StepResult]]  # the `call` fixture (conftest.py)


def test_gold_sql_scores_one_on_every_shipped_task() -> None:
    env = envhub.make("sql")
    report = check_environment(env, concurrency=16)
    assert report.checked == len(env.tasks) >= 1000


def test_gold_scores_one_under_every_comparator_on_the_test_split() -> None:
    for comparator in ("spider", "strict"):
        report = check_environment("sql", split="test", comparator=comparator, concurrency=16)
        assert report.ok and report.checked > 200


async def _score(call: CallTool, task_id: str, query: str, **options: object) -> envhub.CloseResult:
    env = envhub.make("sql", **options)
    session = await env.open(task_id)
    result = await call(session, "submit_sql", query=query)
    assert result.done and result.stop_reason == "terminal_tool"
    return await session.close()


async def test_permuted_columns_score_one_only_under_spider(call: CallTool) -> None:
    task_id = "chinook-hand-05"  # SELECT country, COUNT(*) AS customers ... LIMIT 2
    permuted = (
        "SELECT COUNT(*) AS n, country FROM customer GROUP BY country ORDER BY n DESC LIMIT 2"
    )
    spider = await _score(call, task_id, permuted, comparator="spider")
    bird = await _score(call, task_id, permuted, comparator="bird")
    strict = await _score(call, task_id, permuted, comparator="strict")
    assert (spider.reward, bird.reward, strict.reward) == (1.0, 0.0, 0.0)
    assert spider.components == {
        "submitted": 1.0,
        "executed": 1.0,
        "bird": 0.0,
        "spider": 1.0,
        "strict": 0.0,
    }


async def test_wrong_aggregate_scores_zero(call: CallTool) -> None:
    task_id = "flights-hand-05"  # SELECT MIN(temp) FROM weather WHERE origin = 'LGA'
    for comparator in ("bird", "spider", "strict"):
        result = await _score(
            call,
            task_id,
            "SELECT MAX(temp) FROM weather WHERE origin = 'LGA'",
            comparator=comparator,
        )
        assert result.reward == 0.0
        assert result.components["executed"] == 1.0


async def test_invalid_submission_scores_the_configured_invalid_reward(call: CallTool) -> None:
    task_id = "chinook-0000"
    failing = await _score(call, task_id, "SELECT no_such_column FROM track")
    assert failing.reward == 0.0
    assert failing.components == {"submitted": 1.0, "executed": 0.0}
    assert "no such column" in failing.info["error"]
    rejected = await _score(call, task_id, "DELETE FROM track", invalid_reward=-1)
    assert rejected.reward == -1.0
    assert "not DELETE" in rejected.info["error"]


async def test_no_submission_scores_the_invalid_reward() -> None:
    for invalid_reward, expected in ((0.0, 0.0), (-1, -1.0)):
        env = envhub.make("sql", invalid_reward=invalid_reward)
        session = await env.open("elements-0000")
        await session.step([], content="I think the answer is 42.")
        result = await session.close()
        assert result.reward == expected
        assert result.components == {"submitted": 0.0, "executed": 0.0}
