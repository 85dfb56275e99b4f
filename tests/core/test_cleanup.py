"""Aborts swallow their own failures, and every swallowed failure is logged and counted."""

from __future__ import annotations

import asyncio
import logging

import pytest

import envhub
from envhub.errors import SandboxError
from envhub.runtime.cleanup import abort_quietly, cleanup_failures
from tests.core.toy_envs import ToyEnv


class CloseFailsEnv(ToyEnv):
    """An environment whose ``close`` cannot free its sandbox."""

    name = "close-fails"

    async def close(self) -> None:
        raise SandboxError("sandbox gone while closing")


def test_session_abort_logs_and_counts_a_failing_close(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        session = await envhub.make(CloseFailsEnv).open("toy-1")
        before = cleanup_failures().get("Session.abort of close-fails", 0)
        with caplog.at_level(logging.WARNING, logger="envhub.runtime.cleanup"):
            await session.abort()  # does not raise
            await session.abort()  # aborting twice: nothing left to close
        assert cleanup_failures()["Session.abort of close-fails"] == before + 1
        (record,) = [r for r in caplog.records if r.name == "envhub.runtime.cleanup"]
        assert "sandbox gone while closing" in record.getMessage()
        assert record.exc_info is not None and record.exc_info[0] is SandboxError

    asyncio.run(main())


def test_abort_quietly_records_what_the_session_raises(caplog: pytest.LogCaptureFixture) -> None:
    class Unreachable:
        """A session whose transport is gone: its abort raises."""

        async def abort(self) -> None:
            raise ConnectionError("server went away")

    before = cleanup_failures().get("test abort", 0)
    with caplog.at_level(logging.WARNING, logger="envhub.runtime.cleanup"):
        asyncio.run(abort_quietly(Unreachable(), "test abort"))  # type: ignore[arg-type]
    assert cleanup_failures()["test abort"] == before + 1
    assert any("server went away" in r.getMessage() for r in caplog.records)
