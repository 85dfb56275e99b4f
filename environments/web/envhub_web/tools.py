"""The browsing tools shared by the MiniShop and MiniWoB++ environments.

BrowserGym's bid actions as envhub tools: each acts on the episode's tab and returns
the new page as text; a failed action raises a ``ToolError`` the model reads as an
``is_error`` observation, and the tab stays usable.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any, ClassVar

from envhub import Budgets, Environment, tool
from envhub.errors import InvalidRequest
from envhub_web.pool import BrowserPool, find_chromium, get_pool
from envhub_web.runtime import shutdown
from envhub_web.tab import NAV_TIMEOUT_S, Tab
from envhub_web.text_tab import TextTab

__all__ = ["MODES", "BrowsingEnv"]

MODES = ("browser", "text")


class BrowsingEnv(Environment):
    """Base of the web environments: options, the tab's lifecycle and the tools."""

    #: a tool call may wait for an action (5 s) and a page to answer and to load (twice
    #: ``nav_timeout_s``); the session's tool timeout stays above that, so a slow site
    #: meets the tab's own timeouts (infrastructure) and never the session's (the model's)
    budgets: ClassVar[Budgets] = Budgets(max_turns=20, tool_timeout_s=60.0, episode_timeout_s=300.0)
    final_answer_ends_episode: ClassVar[bool] = True
    #: whether the pages need a browser (MiniWoB++ runs JavaScript)
    needs_browser: ClassVar[bool] = False
    #: give every element a bid (pages without data-bid attributes)
    tag_all_elements: ClassVar[bool] = False

    def __init__(
        self,
        mode: str | None = None,
        nav_timeout_s: float = NAV_TIMEOUT_S,
        chromium_path: str | None = None,
        screenshot_dir: str | None = None,
        fresh_browser: bool = False,
    ) -> None:
        super().__init__()
        self.chromium_path = chromium_path or find_chromium()
        if mode is None:
            mode = "browser" if self.chromium_path else "text"
        if mode not in MODES:
            raise InvalidRequest(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        if mode == "browser" and not (self.chromium_path and shutil.which(self.chromium_path)):
            raise InvalidRequest(
                "browser mode needs Chromium (Debian: `apt-get install -y chromium`, or set "
                "ENVHUB_CHROMIUM / chromium_path); use mode='text' without it"
            )
        if mode == "text" and self.needs_browser:
            raise InvalidRequest(f"{self.name} needs mode='browser' (its pages run JavaScript)")
        self.mode = mode
        self.nav_timeout_s = float(nav_timeout_s)
        self.screenshot_dir = Path(screenshot_dir) if screenshot_dir else None
        self.fresh_browser = bool(fresh_browser)
        self.tab: Tab | None = None
        self.answer: str | None = None
        self._steps = 0

    async def open_tab(self, cookies: dict[str, str], base_url: str) -> Tab:
        """A fresh tab for this episode (a pooled browser context, or an HTTP client),
        confined to the site at ``base_url``."""
        if self.mode == "text":
            return TextTab(cookies, base_url, self.nav_timeout_s)
        from envhub_web.browser_tab import BrowserTab

        assert self.chromium_path is not None
        if self.fresh_browser:  # a Chromium of its own, closed with the episode
            pool = BrowserPool(self.chromium_path, spares=0, linger_s=0.0)
        else:
            pool = await get_pool(self.chromium_path)
        cookie_list: list[dict[str, Any]] = [
            {"name": k, "value": v, "url": base_url} for k, v in cookies.items()
        ]
        return await BrowserTab.open(
            pool,
            cookie_list,
            base_url,
            nav_timeout_s=self.nav_timeout_s,
            tag_all=self.tag_all_elements,
            owns_pool=self.fresh_browser,
        )

    async def observe(self) -> str:
        """The page as text, plus a screenshot artifact when ``screenshot_dir`` is set."""
        assert self.tab is not None
        text = await self.tab.observe()
        if self.screenshot_dir is not None and self.mode == "browser":
            self._steps += 1
            path = self.screenshot_dir / self.task.id / f"step-{self._steps:03d}.png"
            await self.tab.screenshot(path)  # type: ignore[attr-defined]
            text += f"\n\n(screenshot: {path})"
        return text

    @property
    def _tab(self) -> Tab:
        if self.tab is None:
            raise InvalidRequest("the episode has not started")
        return self.tab

    @tool
    async def click(self, bid: str) -> str:
        """Click an element (link, button, checkbox, option text...).

        Args:
            bid: The element id shown in brackets, e.g. "search-button".
        """
        await self._tab.click(bid)
        return await self.observe()

    @tool
    async def fill(self, bid: str, text: str) -> str:
        """Replace the text of a text box.

        Args:
            bid: The text box's element id.
            text: The text to type.
        """
        await self._tab.fill(bid, text)
        return await self.observe()

    @tool
    async def select_option(self, bid: str, value: str) -> str:
        """Choose an option of a select box (combobox) by its value or label.

        Args:
            bid: The select box's element id.
            value: One of the values listed in its options=[...].
        """
        await self._tab.select_option(bid, value)
        return await self.observe()

    @tool
    async def press(self, bid: str, key: str) -> str:
        """Press a key while an element has focus, e.g. "Enter" in a search box.

        Args:
            bid: The element id.
            key: A key name such as "Enter", "Tab" or "ArrowDown".
        """
        await self._tab.press(bid, key)
        return await self.observe()

    @tool
    async def scroll(self, direction: str) -> str:
        """Scroll the page.

        Args:
            direction: "up", "down", "left" or "right".
        """
        await self._tab.scroll(direction)
        return await self.observe()

    @tool
    async def goto(self, url: str) -> str:
        """Open a page of this site; other sites and ports cannot be opened.

        Args:
            url: A path such as "/cart", or an absolute URL on this site.
        """
        await self._tab.goto(url)
        return await self.observe()

    @tool
    async def go_back(self) -> str:
        """Go back to the previous page."""
        await self._tab.go_back()
        return await self.observe()

    @tool(terminal=True)
    async def finish(self, answer: str = "") -> str:
        """End the episode.

        Args:
            answer: Your final answer, if the task asks for one.
        """
        self.answer = answer
        return "episode finished"

    async def close(self) -> None:
        if self.tab is not None:
            tab, self.tab = self.tab, None
            await tab.close()

    @classmethod
    async def aclose_shared(cls) -> None:
        """Stop the process's web runtime: browsers and site servers, which both web
        environments share."""
        await asyncio.to_thread(shutdown)
