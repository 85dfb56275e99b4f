"""Cleanup that must not raise, and the failures it swallows, logged and counted.

Freeing a session after something already went wrong (an exception, a cancelled
episode, a reaped idle session) must not replace the error that matters with a second
one from the cleanup, so aborts swallow their own failures. Swallowed is not hidden:
each one is logged as a warning with its traceback (logger ``envhub.runtime.cleanup``) and
counted per place in this process, so a plugin whose ``close`` always fails, or a server
that no longer answers aborts, shows up in the logs and in :func:`cleanup_failures`.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envhub.protocol import SessionHandle

__all__ = ["abort_quietly", "cleanup_failures", "record_cleanup_failure"]

log = logging.getLogger("envhub.runtime.cleanup")

_failures: Counter[str] = Counter()
_failures_lock = threading.Lock()


def record_cleanup_failure(where: str, exc: BaseException) -> None:
    """Log ``exc``, which the cleanup step ``where`` swallows, and count it."""
    with _failures_lock:
        _failures[where] += 1
    log.warning("%s failed (ignored during cleanup): %s: %s", where, type(exc).__name__, exc,
                exc_info=exc)


def cleanup_failures() -> dict[str, int]:
    """Swallowed cleanup failures of this process so far, by the place that swallowed them."""
    with _failures_lock:
        return dict(_failures)


async def abort_quietly(session: SessionHandle, where: str = "abort") -> None:
    """Free a session without scoring it; a failure is recorded under ``where``, not
    raised, so it cannot hide the failure that made the caller abort."""
    try:
        await session.abort()
    except Exception as exc:
        record_cleanup_failure(where, exc)
