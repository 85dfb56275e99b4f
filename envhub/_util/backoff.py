"""The one backoff formula of every envhub retry (model calls, episodes, server calls)."""

from __future__ import annotations

import math
import random

__all__ = ["backoff_delay"]


def backoff_delay(attempt: int, base_s: float, max_s: float = math.inf) -> float:
    """Seconds to wait before retry ``attempt`` (0-based): between half and all of
    ``min(max_s, base_s * 2**attempt)``.

    Exponential, so a server that stays down is asked less and less often; jittered, so
    the retries of many calls that failed together (a server restart) spread out instead
    of hitting the server in lockstep.
    """
    ceiling = min(max_s, base_s * 2.0**attempt)
    return ceiling / 2 + random.uniform(0, ceiling / 2)
