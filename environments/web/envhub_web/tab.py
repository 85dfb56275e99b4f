"""What both modes implement: a tab the tools drive, and the site-only URL policy.

Tools raise :class:`envhub.errors.ToolError` with a model-readable message for a
missing bid, a wrong element kind, an element that cannot be clicked, or an off-site or
malformed URL; the session turns it into an ``is_error`` observation and the episode goes
on. The site is part of the environment, so what it fails to do is no action's doing: a
site that refuses connections, a page of it that does not load within ``nav_timeout_s``
(:func:`site_did_not_load`) or a browser that died is
:class:`envhub.errors.SandboxError`, and the episode is masked and run again instead of
scored. A model cannot make a page of the site slow: the site answers every request in
bounded work (a search counts each query token once, and the server refuses a request
line over its limit), so only a loaded machine can.

A tab may open pages of its own site only: the same scheme, host and port as the site
the environment serves (:func:`site_url`). Other ports on 127.0.0.1 are other programs
(envhub's own server with ``/v1/environments`` and ``/metrics``, a model server), so
"127.0.0.1" alone is not a boundary. The text mode applies the rule to links, form
actions and redirects too; the browser mode's context cannot reach another origin at
all (:func:`envhub_web.pool.site_only`).
"""

from __future__ import annotations

import re
from typing import Protocol
from urllib.parse import SplitResult, urljoin, urlsplit

from envhub.errors import SandboxError, ToolError

__all__ = ["NAV_TIMEOUT_S", "SCROLL_DIRECTIONS", "Tab", "site_did_not_load", "site_url"]

SCROLL_DIRECTIONS = ("up", "down", "left", "right")
#: how long a page of the site may take to load (``nav_timeout_s``): generous, as only a
#: loaded machine makes the site slow, and what runs past it masks the episode
NAV_TIMEOUT_S = 20.0

_DEFAULT_PORTS = {"http": 80, "https": 443}
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_FIRST_SEGMENT = re.compile(r"[^/?#]*")


def _origin(parts: SplitResult) -> tuple[str, str | None, int | None]:
    """(scheme, host, port) with the scheme's default port; ``ValueError`` for a bad port."""
    return parts.scheme, parts.hostname, parts.port or _DEFAULT_PORTS.get(parts.scheme)


def _same_origin(origin: str, url: str) -> bool:
    try:
        return _origin(urlsplit(url)) == _origin(urlsplit(origin))
    except ValueError:
        return False


def site_url(origin: str, current: str, target: str) -> str:
    """``target`` as an absolute URL (resolved against ``current``, a page of the site, or
    the site's root) if it is a page of the site ``origin``; else a ``ToolError`` saying
    why: malformed, or not on this site."""
    text = target.strip()
    hint = f'give a path such as "/cart" or a URL on {origin}'
    if _CONTROL.search(text):
        raise ToolError(f"{target!r} is not a valid URL: it contains control characters; {hint}")
    first = _FIRST_SEGMENT.match(text)
    scheme = first.group().partition(":")[0] if first and ":" in first.group() else None
    if scheme is not None and not _SCHEME.fullmatch(scheme):
        raise ToolError(f"{target!r} is not a valid URL: {scheme!r} is not a scheme; {hint}")
    base = current if _same_origin(origin, current) else f"{origin}/"
    try:
        url = urljoin(base, text)
        _origin(urlsplit(url))
    except ValueError as exc:
        raise ToolError(f"{target!r} is not a valid URL: {exc}; {hint}") from None
    if not _same_origin(origin, url):
        raise ToolError(
            f"navigation to {target!r} is not allowed: only pages of this site ({origin}) "
            "can be opened"
        )
    return url


def site_did_not_load(url: str, timeout_s: float) -> SandboxError:
    """The infrastructure failure of a page of the tab's own site that did not load in
    time: the machine is too loaded to serve it, which masks the episode (and reruns it)
    instead of scoring the model for it."""
    return SandboxError(
        f"{url}, a page of this episode's own site, did not load within {timeout_s:g}s"
    )


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
