"""Browser mode: one Playwright page in a fresh context from the pool, per episode.

Every Playwright call runs on the runtime loop (:mod:`envhub_web.runtime`); the public
methods hop there, so sessions on any event loop can drive the tab. ``goto`` takes
pages of the tab's own site only (:func:`envhub_web.tab.site_url`), and the context
itself reaches no other origin (:func:`envhub_web.pool.site_only`), whatever a link, a
redirect or a script of the page asks for. Elements are
found by their ``data-bid`` attribute; with ``tag_all`` (MiniWoB pages, which have no
bids of their own) every element without one gets a numeric bid in document order,
which is deterministic for a seeded page and therefore usable in gold actions.

A page of the site that does not load within ``nav_timeout_s`` is infrastructure
(:func:`envhub_web.tab.site_did_not_load`), whether ``goto``, ``go_back`` or an action
opened it. A click waits the action timeout for its element to become actionable (one
that never does, hidden, covered or disabled, is the model's doing: an error
observation), then as long as a page may take to load for a page it opens. An action
that timed out is told apart by the documents the main frame is loading (Playwright's
request events): one still loading is the site's, none the element's.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable, Coroutine
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from playwright.async_api import TimeoutError as PlaywrightTimeout

from envhub.errors import SandboxError, ToolError
from envhub_web.pageview import format_observation
from envhub_web.pool import BrowserPool
from envhub_web.runtime import runtime
from envhub_web.tab import NAV_TIMEOUT_S, SCROLL_DIRECTIONS, site_did_not_load, site_url

if TYPE_CHECKING:
    from playwright.async_api import BrowserContext, Locator, Page, Request

__all__ = ["OBSERVE_JS", "BrowserTab"]

OBSERVE_JS = resources.files("envhub_web").joinpath("observe.js").read_text(encoding="utf-8")
_SCROLL = {"up": (0, -500), "down": (0, 500), "left": (-500, 0), "right": (500, 0)}
T = TypeVar("T")


def _short(exc: Exception) -> str:
    """Playwright messages carry a call log; the model only needs the first line."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


class BrowserTab:
    """A page in its own browser context; create with :meth:`open`, end with :meth:`close`."""

    def __init__(
        self,
        pool: BrowserPool,
        context: BrowserContext,
        page: Page,
        origin: str,
        nav_timeout_s: float,
        tag_all: bool,
        owns_pool: bool = False,
    ) -> None:
        self._pool, self._context, self._page = pool, context, page
        self.origin = origin
        self.nav_timeout_s = nav_timeout_s
        self.tag_all = tag_all
        self.owns_pool = owns_pool
        #: the documents the page's main frame is loading: a navigation to a page of the site
        self._loading: set[Request] = set()
        page.on("request", self._on_request)
        page.on("requestfinished", self._on_request_done)
        page.on("requestfailed", self._on_request_done)

    def _on_request(self, request: Request) -> None:
        if request.is_navigation_request() and request.frame == self._page.main_frame:
            self._loading.add(request)

    def _on_request_done(self, request: Request) -> None:
        self._loading.discard(request)

    @classmethod
    async def open(
        cls,
        pool: BrowserPool,
        cookies: list[dict[str, Any]],
        origin: str,
        *,
        nav_timeout_s: float = NAV_TIMEOUT_S,
        action_timeout_s: float = 5.0,
        tag_all: bool = False,
        owns_pool: bool = False,
    ) -> BrowserTab:
        """A tab on the site ``origin`` (e.g. ``http://127.0.0.1:8123``) in a fresh context
        of ``pool``; ``owns_pool``: close the pool with the tab."""

        async def start() -> BrowserTab:
            context = None
            try:
                context, page = await pool.new_page(origin)
                if cookies:
                    await context.add_cookies(cookies)
                context.set_default_timeout(action_timeout_s * 1000)
                context.set_default_navigation_timeout(nav_timeout_s * 1000)
            except BaseException:
                if context is not None:
                    await pool.release(context)
                if owns_pool:
                    await pool.close()
                raise
            return cls(pool, context, page, origin, nav_timeout_s, tag_all, owns_pool)

        return await runtime().run(start())

    @property
    def url(self) -> str:
        return self._page.url

    async def _on_runtime(self, coro: Coroutine[Any, Any, T]) -> T:
        return await runtime().run(coro)

    def _alive(self) -> bool:
        browser = self._context.browser
        return not self._page.is_closed() and (browser is None or browser.is_connected())

    def _failure(self, message: str) -> ToolError | SandboxError:
        """A model-readable error, or an infra failure (masks the episode) if Chromium died."""
        if self._alive():
            return ToolError(message)
        return SandboxError(f"the browser of this episode is gone ({message})")

    async def _locator(self, bid: str) -> Locator:
        locator = self._page.locator(f"[data-bid={json.dumps(bid)}]")
        if await locator.count() == 0:
            raise ToolError(f"no element with bid {bid!r} on this page ({self.url})")
        return locator.first

    async def _settle(self) -> None:
        """Let a navigation an action started finish loading (bounded by the nav timeout)."""
        try:
            await self._page.wait_for_load_state(
                "domcontentloaded", timeout=self.nav_timeout_s * 1000
            )
        except PlaywrightTimeout:
            raise site_did_not_load(self.url, self.nav_timeout_s) from None
        except Exception as exc:
            raise self._failure(f"the page did not finish loading: {_short(exc)}") from None

    def _timed_out(self, failure: str) -> ToolError | SandboxError:
        """What an action that timed out met: a page of the site that was still loading
        (the action opened it, Playwright waited for it) is infrastructure; with no page
        loading the element never became actionable, the model's doing (``failure``)."""
        document = next(iter(self._loading), None)
        if document is None:
            return self._failure(failure)
        return site_did_not_load(document.url, self.nav_timeout_s)

    async def _act(
        self, bid: str, what: str, operation: Callable[[Locator], Awaitable[Any]]
    ) -> None:
        """Find ``bid`` and run ``operation`` on it, then let a page it opened load;
        Playwright errors become ToolErrors, a page of the site that does not load a
        SandboxError."""

        async def run() -> None:
            try:
                await operation(await self._locator(bid))
            except ToolError:
                raise
            except PlaywrightTimeout as exc:
                raise self._timed_out(f"{what} on [{bid}] failed: {_short(exc)}") from None
            except Exception as exc:
                raise self._failure(f"{what} on [{bid}] failed: {_short(exc)}") from None
            await self._settle()

        await self._on_runtime(run())

    async def goto(self, url: str) -> None:
        target = site_url(self.origin, self.url, url)

        async def run() -> None:
            try:
                await self._page.goto(target, wait_until="domcontentloaded")
            except PlaywrightTimeout:
                raise site_did_not_load(target, self.nav_timeout_s) from None
            except Exception as exc:
                if not self._alive():
                    raise self._failure(f"{target} did not load: {_short(exc)}") from None
                if "net::ERR_CONNECTION_REFUSED" in str(exc):  # only the site is reachable
                    raise SandboxError(
                        f"the site of this episode refuses connections ({_short(exc)})"
                    ) from None
                await self._stop_loading()
                raise ToolError(
                    f"{target} did not load: {_short(exc)}; still on {self.url}"
                ) from None

        await self._on_runtime(run())

    async def _stop_loading(self) -> None:
        """Stop a navigation that failed or hangs, so the tab is usable; best effort: a
        page left on Chromium's error page has nothing to stop (CDP says so)."""
        with contextlib.suppress(Exception):
            cdp = await self._context.new_cdp_session(self._page)
            try:
                await cdp.send("Page.stopLoading")
            finally:
                await cdp.detach()

    async def click(self, bid: str) -> None:
        async def click(el: Locator) -> None:
            await el.click(trial=True)  # actionable within the action timeout, or the model's
            await el.click(timeout=self.nav_timeout_s * 1000)  # a page it opens: the site's

        await self._act(bid, "click", click)

    async def fill(self, bid: str, text: str) -> None:
        await self._act(bid, "fill", lambda el: el.fill(text))

    async def select_option(self, bid: str, value: str) -> None:
        async def choose(el: Locator) -> None:
            options = await el.evaluate(
                "el => el.tagName === 'SELECT'"
                " ? Array.from(el.options).map(o => [o.value, o.label]) : null"
            )
            if options is None:
                raise ToolError(f"element [{bid}] is not a select box")
            if not any(value in pair for pair in options):
                choices = ", ".join(repr(v) for v, _ in options)
                raise ToolError(f"no option {value!r} in [{bid}]; options: {choices}")
            await el.select_option(value)

        await self._act(bid, "select_option", choose)

    async def press(self, bid: str, key: str) -> None:
        # a key press (Enter in a form) may open a page: it waits as long as a page loads
        await self._act(bid, "press", lambda el: el.press(key, timeout=self.nav_timeout_s * 1000))

    async def scroll(self, direction: str) -> None:
        if direction not in _SCROLL:
            raise ToolError(f"direction must be one of {', '.join(SCROLL_DIRECTIONS)}")
        await self._on_runtime(self._page.mouse.wheel(*_SCROLL[direction]))

    async def go_back(self) -> None:
        async def run() -> None:
            before = self.url
            try:
                response = await self._page.go_back(wait_until="domcontentloaded")
                if self.url == "about:blank":  # the blank page every tab starts on
                    await self._page.go_forward(wait_until="domcontentloaded")
                    response = None
            except PlaywrightTimeout:
                raise site_did_not_load("the previous page", self.nav_timeout_s) from None
            except Exception as exc:
                raise self._failure(f"go_back failed: {_short(exc)}") from None
            if response is None and self.url in (before, "about:blank"):
                raise ToolError("there is no previous page")

        await self._on_runtime(run())

    async def evaluate(self, script: str, arg: Any = None) -> Any:
        """Run JavaScript in the page (MiniWoB's seeding and reward)."""
        return await self._on_runtime(self._page.evaluate(script, arg))

    async def observe(self) -> str:
        async def run() -> str:
            for _ in range(3):
                try:
                    snapshot = await self._page.evaluate(OBSERVE_JS, {"tagAll": self.tag_all})
                    return format_observation(self.url, snapshot["title"], snapshot["lines"])
                except Exception:
                    await self._settle()
            try:
                snapshot = await self._page.evaluate(OBSERVE_JS, {"tagAll": self.tag_all})
            except Exception as exc:
                raise self._failure(f"cannot read the page: {_short(exc)}") from None
            return format_observation(self.url, snapshot["title"], snapshot["lines"])

        return await self._on_runtime(run())

    async def screenshot(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        await self._on_runtime(self._page.screenshot(path=str(path)))

    async def close(self) -> None:
        async def run() -> None:
            await self._pool.release(self._context)
            if self.owns_pool:
                await self._pool.close()

        await self._on_runtime(run())
