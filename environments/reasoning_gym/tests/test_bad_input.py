"""Bad options, out-of-bounds client options and hostile answers: clear errors or a
zero reward with the reason, never a crash, a hang or code run on the server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from envhub_reasoning_gym import UNPARSEABLE, ReasoningGymEnv
from reasoning_gym.factory import create_dataset

import envhub
from envhub.errors import InvalidRequest
from envhub.runtime.client_options import validate_client_options
from envhub.types import CloseResult


def _build(**options: Any) -> None:
    asyncio.run(envhub.make("reasoning_gym", **options).task_ids())


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"datasets": "chain_sum,no_such_dataset"}, "unknown Reasoning Gym dataset.*no_such"),
        ({"datasets": 5}, "comma-separated string or a list"),
        ({"datasets": ","}, "names no dataset"),
        ({"size": "ten"}, "size must be a non-negative integer"),
        ({"size": 0}, "size must be at least 1"),
        ({"seed": -1}, "seed must be a non-negative integer"),
        ({"size": 300}, "100 datasets x size 300 is more than max_tasks=20000"),
        ({"config": "{not json"}, "config is not JSON"),
        ({"config": [1]}, "config must map dataset names"),
        ({"datasets": "gcd", "config": {"lcm": {}}}, "not among the selected datasets"),
        ({"datasets": "gcd", "config": {"gcd": {"nope": 1}}}, "has no field 'nope'"),
        ({"datasets": "gcd", "config": {"gcd": {"seed": 1}}}, "use the seed option"),
        ({"datasets": "gcd", "config": {"gcd": 3}}, "must be an object"),
        ({"datasets": "chain_sum", "config": {"chain_sum": {"min_terms": 0}}}, "is invalid"),
        ({"sandbox": "vm"}, "unknown sandbox backend"),
    ],
)
def test_bad_options_are_clear_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        _build(**options)


def test_config_reaches_the_generator() -> None:
    env = envhub.make(
        "reasoning_gym", datasets="chain_sum", size=3, config='{"chain_sum": {"min_terms": 5}}'
    )
    task = asyncio.run(env.task(asyncio.run(env.task_ids())[0]))
    assert task.prompt[1]["content"].count("+") + task.prompt[1]["content"].count("-") >= 4


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"size": 10**6}, "less than or equal to 500"),
        ({"seed": 2**40}, "less than 4294967296"),
        ({"config": {"chain_sum": {"max_terms": 10**6}}}, "outside the curriculum's levels"),
        ({"config": {"chain_sum": {"max_digits": "9"}}}, "outside the curriculum's levels"),
        ({"config": {"chain_sum": {"allow_negation": True}}}, "not settable by clients"),
        ({"config": {"nope": {}}}, "unknown Reasoning Gym dataset"),
        ({"sandbox": "local"}, "set by the server's operator"),
        ({"python": True}, "set by the server's operator"),
        ({"max_tasks": 10**9}, "set by the server's operator"),
        ({"score_memory_mb": 10**6}, "set by the server's operator"),
    ],
)
def test_client_options_are_bounded(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        validate_client_options(ReasoningGymEnv, options, env="reasoning_gym")


def test_client_options_within_bounds_pass() -> None:
    options = {
        "datasets": ["chain_sum", "gcd"],
        "size": 500,
        "seed": 7,
        "config": {"chain_sum": {"min_terms": 2, "max_terms": 6, "max_digits": 4}},
    }
    assert validate_client_options(ReasoningGymEnv, options, env="reasoning_gym") == options


async def _answer(task_id: str, answer: Any, **options: Any) -> tuple[list[Any], CloseResult]:
    env = envhub.make("reasoning_gym", size=1, **options)
    try:
        session = await env.open(task_id)
        steps = []
        for value in [answer] if not isinstance(answer, list) else answer:
            steps.append(await session.step([{"id": "1", "name": "answer", "arguments": value}]))
        return steps, await session.close()
    finally:
        await env.aclose()


def test_an_answer_that_would_run_code_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    hostile = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    _, closed = asyncio.run(_answer("n_queens-0-0000", {"answer": hostile}, datasets="n_queens"))
    assert closed.reward == 0.0 and not marker.exists()
    assert "refused" in closed.info["score_error"]


#: answers that pass a screen that bounds only exponents, and take the scorer's memory
#: or time (``[0]*10**7`` alone took 893 MB and 4.9 s)
EXHAUSTING = [
    ("countdown", "[0]*10**9"),
    ("countdown", "[0]*10**7"),
    ("countdown", "((((9**64)**64)**64)**64)**64"),
    ("countdown", "factorial(factorial(10))"),
    ("countdown", "(9**64)!"),
    ("countdown", "1e999999"),
    ("polynomial_multiplication", "(((x+1)**64)**64)**64"),
    ("string_insertion", "'a'*10**9"),
    ("string_insertion", "1<<10**9"),
    ("spiral_matrix", "[[0]*10**5]*10**5"),
]


@pytest.mark.parametrize(("dataset", "answer"), EXHAUSTING)
def test_answers_that_would_exhaust_the_scorer_are_refused(dataset: str, answer: str) -> None:
    """Refused before any worker evaluates them, so well within the score timeout:
    scored as text the dataset's scorer cannot parse."""
    entry = create_dataset(dataset, seed=0, size=1)[0]
    unparseable = create_dataset(dataset, seed=0, size=1).score_answer(UNPARSEABLE, entry)
    options = {"datasets": dataset, "score_timeout_s": 3.0}
    _, closed = asyncio.run(_answer(f"{dataset}-0-0000", {"answer": answer}, **options))
    assert closed.reward == unparseable and "refused" in closed.info["score_error"]


def test_malformed_answer_calls_are_error_observations() -> None:
    calls = [{"answer": {"x": 1}}, "{not json", {}]
    steps, closed = asyncio.run(_answer("gcd-0-0000", calls, datasets="gcd"))
    assert all(step.observations[0].is_error and not step.done for step in steps)
    assert closed.reward == 0.0 and closed.components == {"score": 0.0, "answered": 0.0}
