"""Fixtures of the envhub-sql tests (fixtures, not a helper module, so that any pytest
import mode works)."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import envhub
from envhub import Session, StepResult, ToolCall

CallTool = Callable[..., Awaitable[StepResult]]


@pytest.fixture
def sql_env() -> envhub.LocalEnvironment:
    return envhub.make("sql")


@pytest.fixture
def call() -> CallTool:
    """``await call(session, "run_sql", query=...)``: one turn with one tool call."""
    ids = itertools.count()

    async def step(session: Session, tool: str, /, **arguments: Any) -> StepResult:
        return await session.step(
            [ToolCall(id=f"call-{next(ids)}", name=tool, arguments=arguments)]
        )

    return step
