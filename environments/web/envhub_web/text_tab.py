"""Text mode: the site fetched over HTTP and driven through its HTML, with no browser.

Links are followed, forms are filled and submitted like a browser would (submitter
name/value, ``formaction``, implicit submission on Enter), and the page is rendered
with :mod:`envhub_web.pageview`. There is no JavaScript, so this mode is for server-
rendered sites like MiniShop; ``scroll`` is a no-op because the whole page is shown.
"""

from __future__ import annotations

import copy
from urllib.parse import urlencode, urlsplit, urlunsplit

import httpx

from envhub.errors import SandboxError, ToolError
from envhub_web.pageview import Element, Page, format_observation, parse_html
from envhub_web.tab import NAV_TIMEOUT_S, SCROLL_DIRECTIONS, site_did_not_load, site_url

__all__ = ["TextTab"]

_MAX_REDIRECTS = 5


class TextTab:
    """A page of the site ``origin`` driven over HTTP; one per episode, with its own
    cookies and history. Links, form actions and redirects off the site are refused."""

    def __init__(
        self, cookies: dict[str, str], origin: str, nav_timeout_s: float = NAV_TIMEOUT_S
    ) -> None:
        self.origin = origin
        self.nav_timeout_s = nav_timeout_s
        self._client = httpx.AsyncClient(
            cookies=cookies,
            timeout=nav_timeout_s,
            follow_redirects=False,
            trust_env=False,
            verify=False,  # plain http on 127.0.0.1; loading the CA bundle costs ~100 ms
        )
        self._history: list[str] = []
        self.page: Page | None = None

    @property
    def url(self) -> str:
        return self.page.url if self.page else ""

    async def _request(self, method: str, url: str, data: dict[str, str] | None = None) -> None:
        for _ in range(_MAX_REDIRECTS + 1):
            try:
                response = await self._client.request(method, url, data=data)
            except httpx.TimeoutException:
                raise site_did_not_load(url, self.nav_timeout_s) from None
            except httpx.ConnectError as exc:  # only the tab's own site is ever asked
                raise SandboxError(
                    f"the site of this episode refuses connections ({url}: {exc})"
                ) from None
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                raise ToolError(f"cannot load {url}: {type(exc).__name__}: {exc}") from None
            if response.is_redirect and "location" in response.headers:
                url = self._site_url(response.headers["location"], current=url)
                method, data = "GET", None
                continue
            self.page = parse_html(response.text, str(response.url), response.status_code)
            self._history.append(self.page.url)
            return
        raise ToolError(f"too many redirects loading {url}")

    def _element(self, bid: str) -> Element:
        element = self.page.by_bid.get(bid) if self.page else None
        if element is None:
            raise ToolError(f"no element with bid {bid!r} on this page ({self.url})")
        if element.disabled:
            raise ToolError(f"element [{bid}] is disabled")
        return element

    def _site_url(self, target: str, current: str | None = None) -> str:
        return site_url(self.origin, self.url if current is None else current, target)

    async def goto(self, url: str) -> None:
        await self._request("GET", self._site_url(url))

    async def click(self, bid: str) -> None:
        element = self._element(bid)
        role = element.role
        if role == "link":
            await self.goto(element.attrs["href"])
        elif role == "button":
            kind = element.attrs.get("type", "submit").lower()
            form = element.ancestor("form")
            if form is not None and kind == "submit":
                await self._submit(form, element)
        elif role == "checkbox":
            element.checked = not element.checked
        elif role == "radio":
            self._check_radio(element)

    def _check_radio(self, element: Element) -> None:
        scope = element.ancestor("form") or (self.page.root if self.page else element)
        name = element.attrs.get("name")
        for other in scope.iter():
            if other.input_type == "radio" and name and other.attrs.get("name") == name:
                other.checked = False
        element.checked = True

    async def fill(self, bid: str, text: str) -> None:
        element = self._element(bid)
        if element.role != "textbox":
            raise ToolError(f"element [{bid}] is a {element.role or element.tag}, not a text box")
        element.value = text

    async def select_option(self, bid: str, value: str) -> None:
        element = self._element(bid)
        if element.tag != "select":
            raise ToolError(f"element [{bid}] is a {element.role or element.tag}, not a select box")
        values = [
            (o.attrs.get("value", o.text().strip()), o.text().strip()) for o in element.options
        ]
        for option_value, label in values:
            if value in (option_value, label):
                element.value = option_value
                return
        choices = ", ".join(repr(v) for v, _ in values)
        raise ToolError(f"no option {value!r} in [{bid}]; options: {choices}")

    async def press(self, bid: str, key: str) -> None:
        element = self._element(bid)
        if key != "Enter":
            return
        if element.role in ("link", "button"):
            await self.click(bid)
        elif element.role == "textbox" and (form := element.ancestor("form")) is not None:
            submitter = next(
                (
                    e
                    for e in form.iter()
                    if e.role == "button" and e.attrs.get("type", "submit").lower() == "submit"
                ),
                None,
            )
            await self._submit(form, submitter)

    async def scroll(self, direction: str) -> None:
        if direction not in SCROLL_DIRECTIONS:
            raise ToolError(f"direction must be one of {', '.join(SCROLL_DIRECTIONS)}")

    async def go_back(self) -> None:
        if len(self._history) < 2:
            raise ToolError("there is no previous page")
        self._history.pop()
        previous = self._history.pop()
        await self._request("GET", previous)

    async def _submit(self, form: Element, submitter: Element | None) -> None:
        fields: list[tuple[str, str]] = []
        for el in form.iter():
            name = el.attrs.get("name")
            if not name or el.disabled or el.tag not in ("input", "select", "textarea", "button"):
                continue
            if el.role == "button" or el.input_type in ("image", "reset"):
                if el is submitter:
                    fields.append((name, el.attrs.get("value", "")))
            elif el.input_type in ("checkbox", "radio"):
                if el.checked:
                    fields.append((name, el.attrs.get("value", "on")))
            else:
                fields.append((name, el.value))
        attrs = submitter.attrs if submitter is not None else {}
        action = attrs.get("formaction") or form.attrs.get("action") or self.url
        method = (attrs.get("formmethod") or form.attrs.get("method") or "get").upper()
        url = self._site_url(action)
        if method == "POST":
            await self._request("POST", url, dict(fields))
        else:
            parts = urlsplit(url)
            await self._request("GET", urlunsplit(parts._replace(query=urlencode(fields))))

    def view(self) -> tuple[Page | None, list[str]]:
        """A copy of the page (filled fields included) and the history: a fork's
        snapshot of the tab."""
        return copy.deepcopy(self.page), list(self._history)

    def show(self, view: tuple[Page | None, list[str]]) -> None:
        """Take over a :meth:`view` (a copy of it), as a fork's child does, with no
        request made."""
        page, history = view
        self.page, self._history = copy.deepcopy(page), list(history)

    async def observe(self) -> str:
        if self.page is None:
            return format_observation("", "", [])
        return format_observation(self.page.url, self.page.title, self.page.lines())

    async def close(self) -> None:
        await self._client.aclose()
