"""Waiting out a failure the fleet tests cause: a replica's server going away, and a
condition (a replacement registered, a replica healthy again) that the fleet reaches
in its own time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx


def server_down(url: str) -> bool:
    """Whether the environment server at ``url`` no longer answers ``/health``."""
    try:
        httpx.get(f"{url}/health", timeout=2)
    except httpx.HTTPError:
        return True
    return False


async def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 120.0) -> Any:
    """Poll ``check()`` (blocking calls run in a thread) until it returns a truthy value,
    which it returns; fails naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not (value := await asyncio.to_thread(check)):
        assert time.monotonic() < deadline, f"not within {timeout_s:g}s: {what}"
        await asyncio.sleep(0.5)
    return value
