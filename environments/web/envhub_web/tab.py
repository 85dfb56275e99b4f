"""What both modes implement: a tab the tools drive, and the 127.0.0.1 allow-list.

Tools raise :class:`envhub.errors.ToolError` with a model-readable message for a
missing bid, a wrong element kind, an off-site URL or a page that does not load;
the session turns it into an ``is_error`` observation and the episode goes on.
"""

from __future__ import annotations

from typing import Protocol
from urllib.parse import urljoin, urlsplit

from envhub.errors import ToolError

__all__ = ["ALLOWED_HOSTS", "SCROLL_DIRECTIONS", "Tab", "allowed_url"]

ALLOWED_HOSTS = frozenset({"127.0.0.1"})
SCROLL_DIRECTIONS = ("up", "down", "left", "right")


def allowed_url(current: str, target: str) -> str:
    """``target`` resolved against ``current``; raises unless it is http(s) on 127.0.0.1."""
    url = urljoin(current or "http://127.0.0.1/", target.strip())
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or parts.hostname not in ALLOWED_HOSTS:
        raise ToolError(
            f"navigation to {target!r} is not allowed: only http://127.0.0.1 pages can be opened"
        )
    return url


class Tab(Protocol):
    """One episode's page; ``observe()`` renders it in the shared text format."""

    url: str

    async def goto(self, url: str) -> None: ...
    async def click(self, bid: str) -> None: ...
    async def fill(self, bid: str, text: str) -> None: ...
    async def select_option(self, bid: str, value: str) -> None: ...
    async def press(self, bid: str, key: str) -> None: ...
    async def scroll(self, direction: str) -> None: ...
    async def go_back(self) -> None: ...
    async def observe(self) -> str: ...
    async def close(self) -> None: ...
