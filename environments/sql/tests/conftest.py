"""Fixtures of the envhub-rl-sql tests (fixtures, not a helper module, so that any pytest
import mode works)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

import envhub
from envhub import StepResult
from envhub.testing import call_tool

CallTool = Callable[..., Awaitable[StepResult]]


@pytest.fixture
def sql_env() -> envhub.LocalEnvironment:
    return envhub.make("sql")


@pytest.fixture
def call() -> CallTool:
    """``await call(session, tool, **arguments)``: one turn with one tool call."""
    return call_tool
