"""A pool of headless Chromium processes; every episode gets a fresh browser context.

A context is an isolated profile (cookies, storage, cache) inside a running browser,
so opening one costs a fraction of launching Chromium; ``spares`` contexts with an
open page are kept ready, so a reset usually only navigates. The pool runs on the
runtime loop (see :mod:`envhub_web.runtime`), grows up to ``max_browsers`` processes
with at most ``contexts_per_browser`` contexts each, and closes its browsers when no
episode has held a context for ``linger_s`` seconds, or at
:func:`envhub_web.runtime.shutdown`.

A context reaches one site only: its proxy is a closed port and only the site's
``host:port`` bypasses it (:func:`site_only`). Chromium would otherwise reach every
port on 127.0.0.1 directly (envhub's own server, a model server), by ``goto``, a link,
a redirect, a script's ``fetch`` or a WebSocket alike. Spares are therefore kept per
site.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from envhub.errors import EnvironmentFailure
from envhub_web.runtime import add_shutdown_hook, runtime

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext, Page, Playwright, ProxySettings

__all__ = [
    "CHROMIUM_ARGS",
    "BrowserPool",
    "find_chromium",
    "get_pool",
    "launch_browser",
    "site_only",
]

#: nothing listens on the discard port: a request sent to this proxy fails
_NOWHERE = "http://127.0.0.1:9"

#: Flags for Debian's Chromium in containers; the proxy and resolver rules make every
#: host other than 127.0.0.1 unreachable from the page, whatever a page links to (a
#: context's own proxy, :func:`site_only`, narrows that to one port of 127.0.0.1).
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
    f"--proxy-server={_NOWHERE}",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
)


VIEWPORT = {"width": 1024, "height": 768}


def site_only(origin: str) -> ProxySettings:
    """A context proxy that lets requests reach ``origin`` (``http://127.0.0.1:8123``)
    and nothing else: ``<-loopback>`` removes Chromium's implicit bypass of loopback
    addresses, so other ports of 127.0.0.1 go to the proxy, which is not there."""
    parts = urlsplit(origin)
    return {"server": _NOWHERE, "bypass": f"<-loopback>,{parts.hostname}:{parts.port}"}


def find_chromium() -> str | None:
    """``$ENVHUB_CHROMIUM``, else a Chromium on PATH (Debian: ``/usr/bin/chromium``)."""
    configured = os.environ.get("ENVHUB_CHROMIUM")
    if configured:
        return configured
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


async def launch_browser(playwright: Playwright, executable: str) -> Browser:
    """Start one headless Chromium; a missing or broken binary is an infra failure."""
    try:
        return await playwright.chromium.launch(
            executable_path=executable,
            headless=True,
            args=list(CHROMIUM_ARGS),
            timeout=60_000,
        )
    except Exception as exc:
        raise EnvironmentFailure(
            f"cannot start Chromium at {executable}: {exc}. Install it (Debian: "
            "`apt-get install -y chromium`) or use mode='text'."
        ) from exc


@dataclass(eq=False)
class _Slot:
    browser: Browser
    contexts: int = 0


@dataclass(eq=False)
class BrowserPool:
    """Browsers shared by all episodes of the process (lives on the runtime loop)."""

    executable: str
    contexts_per_browser: int = 8
    max_browsers: int = 4
    linger_s: float = 10.0
    spares: int = 2
    _playwright: Playwright | None = None
    _spare: dict[str, list[tuple[BrowserContext, Page]]] = field(default_factory=dict)
    _refill: asyncio.Task[None] | None = None
    _warming: int = 0
    _slots: list[_Slot] = field(default_factory=list)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _idle_timer: asyncio.TimerHandle | None = None
    launches: int = 0

    async def _start_playwright(self) -> Playwright:
        if self._playwright is None:
            from playwright.async_api import async_playwright

            self._playwright = await async_playwright().start()
        return self._playwright

    async def _slot(self) -> _Slot:
        self._slots = [s for s in self._slots if s.browser.is_connected()]
        free = [s for s in self._slots if s.contexts < self.contexts_per_browser]
        if free:
            return min(free, key=lambda s: s.contexts)
        if len(self._slots) >= self.max_browsers:
            return min(self._slots, key=lambda s: s.contexts)
        browser = await launch_browser(await self._start_playwright(), self.executable)
        self.launches += 1
        slot = _Slot(browser)
        self._slots.append(slot)
        return slot

    async def _create(self, origin: str) -> tuple[BrowserContext, Page]:
        async with self._lock:
            slot = await self._slot()
            slot.contexts += 1
        try:
            context = await slot.browser.new_context(viewport=VIEWPORT, proxy=site_only(origin))
            page = await context.new_page()
        except BaseException:
            slot.contexts -= 1
            raise
        context._envhub_slot = slot  # type: ignore[attr-defined]
        return context, page

    async def new_page(self, origin: str) -> tuple[BrowserContext, Page]:
        """A page in a fresh, isolated context that reaches the site ``origin`` only; give
        the context back with :meth:`release`.

        A pre-warmed spare is handed out when one is ready (opening a context and a page
        is most of a reset's cost), and a background task makes the next spare.
        """
        self._cancel_idle()
        spares = self._spare.setdefault(origin, [])
        while spares:
            context, page = spares.pop()
            browser = context.browser
            if browser is not None and browser.is_connected() and not page.is_closed():
                self._refill_soon(origin)
                return context, page
            await self._discard(context)
        pair = await self._create(origin)
        self._refill_soon(origin)
        return pair

    def _refill_soon(self, origin: str) -> None:
        if self.spares and (self._refill is None or self._refill.done()):
            loop = asyncio.get_running_loop()
            self._refill = loop.create_task(self._make_spares(origin))

    async def _make_spares(self, origin: str) -> None:
        spares = self._spare.setdefault(origin, [])
        while len(spares) < self.spares:
            self._warming += 1
            try:
                spares.append(await self._create(origin))
            except Exception:
                return  # the next new_page() opens its own context and reports the error
            finally:
                self._warming -= 1
            self._idle_soon()

    async def _discard(self, context: BrowserContext) -> None:
        slot: _Slot = context._envhub_slot  # type: ignore[attr-defined]
        try:
            await context.close()
        except Exception:
            pass  # the browser may have died; the slot is freed anyway
        finally:
            slot.contexts -= 1

    async def release(self, context: BrowserContext) -> None:
        """Close an episode's context; with no episode left, close the browsers after
        ``linger_s`` seconds."""
        await self._discard(context)
        self._idle_soon()

    def _idle_soon(self) -> None:
        if self.in_use == 0 and self._idle_timer is None:
            loop = asyncio.get_running_loop()
            self._idle_timer = loop.call_later(
                self.linger_s, lambda: loop.create_task(self._idle())
            )

    def _cancel_idle(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    @property
    def in_use(self) -> int:
        """Contexts held by episodes (open contexts minus ready and warming spares)."""
        spare = sum(len(pairs) for pairs in self._spare.values())
        return sum(s.contexts for s in self._slots) - spare - self._warming

    @property
    def browsers(self) -> int:
        return len(self._slots)

    async def _idle(self) -> None:
        self._idle_timer = None
        if self.in_use == 0:
            await self.close_browsers()

    async def close_browsers(self) -> None:
        if self._refill is not None:
            self._refill.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._refill
            self._refill = None
        self._spare.clear()  # their contexts close with their browsers
        async with self._lock:
            slots, self._slots = self._slots, []
            for slot in slots:
                try:
                    await slot.browser.close()
                except Exception:
                    pass

    async def close(self) -> None:
        self._cancel_idle()
        await self.close_browsers()
        if self._playwright is not None:
            playwright, self._playwright = self._playwright, None
            await playwright.stop()


async def get_pool(executable: str, linger_s: float = 10.0) -> BrowserPool:
    """The process's pool for this Chromium binary (started on the runtime loop)."""

    async def start() -> BrowserPool:
        pool = BrowserPool(executable, linger_s=linger_s)
        add_shutdown_hook(pool.close)
        return pool

    return await runtime().service(("browser-pool", executable), start)
