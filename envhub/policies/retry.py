"""Retrying transient model-server errors (429, 5xx, timeouts, connection resets)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from envhub._util.backoff import backoff_delay
from envhub.errors import TransientPolicyError

__all__ = ["RetryPolicy"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retries with exponential backoff and jitter (:func:`envhub._util.backoff.backoff_delay`):
    attempt ``n`` waits between half and all of ``min(max_delay_s, base_delay_s * 2**n)``."""

    max_attempts: int = 6
    base_delay_s: float = 0.25
    max_delay_s: float = 10.0

    def delay(self, attempt: int) -> float:
        return backoff_delay(attempt, self.base_delay_s, self.max_delay_s)

    async def call(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run ``fn`` until it succeeds, raises a non-transient error, or attempts run out."""
        for attempt in range(self.max_attempts - 1):
            try:
                return await fn()
            except TransientPolicyError:
                await asyncio.sleep(self.delay(attempt))
        return await fn()
