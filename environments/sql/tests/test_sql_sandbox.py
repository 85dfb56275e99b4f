"""Model-written queries inside a sandbox: same answers, same limits, same rewards."""

from __future__ import annotations

import shutil
from collections.abc import Awaitable, Callable

import pytest

import envhub
from envhub import StepResult
from envhub.errors import InvalidRequest
from envhub.testing import check_environment

CallTool = Callable[..., Awaitable[StepResult]]  # the `call` fixture (conftest.py)

BACKENDS = [
    "local",
    pytest.param(
        "bwrap",
        marks=pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
    ),
]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_queries_run_in_the_sandbox(backend: str, call: CallTool) -> None:
    env = envhub.make("sql", sandbox=backend, query_timeout_s=1.0)
    session = await env.open("elements-hand-02")  # how many isotopes does carbon have
    rows = await call(session, "run_sql", query="SELECT symbol, x'00ff' FROM elements LIMIT 1")
    assert rows.observations[0].content == "symbol | x'00ff'\nH | <2 bytes>\n(1 row)"
    runaway = "SELECT COUNT(*) FROM isotopes AS a, isotopes AS b, isotopes AS c"
    stopped = (await call(session, "run_sql", query=runaway)).observations[0]
    assert stopped.is_error and "ran longer than the 1 s limit" in stopped.content
    rejected = (await call(session, "run_sql", query="DROP TABLE elements")).observations[0]
    assert rejected.is_error and "not DROP" in rejected.content
    await call(
        session,
        "submit_sql",
        query="SELECT COUNT(*) FROM isotopes WHERE atomic_number = 6",
    )
    assert (await session.close()).reward == 1.0


def test_gold_scores_one_in_a_sandbox() -> None:
    check_environment("sql", task_ids=["chinook-hand-01", "flights-hand-03"], sandbox="local")


def test_unknown_sandbox_backend_is_a_clear_error() -> None:
    with pytest.raises(InvalidRequest, match="'vm'; choose one of bwrap, docker, local"):
        envhub.make("sql", sandbox="vm")
