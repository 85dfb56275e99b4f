"""Pages as text: a small HTML tree with live form state, and the observation format.

The observation is one line per control, ``[bid] role "name"`` plus its state
(``value=``, ``options=[...]``, ``checked``, ``disabled``), and one line per text
node, in document order. ``observe.js`` computes the same lines from a live DOM in
browser mode; the test suite checks that both agree on every MiniShop page type, so
a policy trained in text mode sees the same observations in a browser.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

__all__ = ["Element", "Page", "format_observation", "parse_html"]

_VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())
_SKIP = frozenset({"script", "style", "noscript", "template", "head"})
_LEAF = frozenset({"link", "button", "textbox", "combobox", "checkbox", "radio", "heading"})
_SPACE = re.compile(r"\s+")


def _norm(text: str | None) -> str:
    return _SPACE.sub(" ", text or "").strip()


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


@dataclass(eq=False)
class Element:
    """An HTML element; ``value``/``checked`` hold the live form state in text mode."""

    tag: str
    attrs: dict[str, str]
    parent: Element | None = None
    children: list[Element | str] = field(default_factory=list)
    value: str = ""
    checked: bool = False

    @property
    def bid(self) -> str | None:
        return self.attrs.get("data-bid")

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self):
        yield self
        for child in self.children:
            if isinstance(child, Element):
                yield from child.iter()

    def ancestor(self, tag: str) -> Element | None:
        node = self.parent
        while node is not None and node.tag != tag:
            node = node.parent
        return node

    @property
    def input_type(self) -> str:
        return self.attrs.get("type", "text").lower() if self.tag == "input" else ""

    @property
    def options(self) -> list[Element]:
        return [e for e in self.iter() if e.tag == "option"] if self.tag == "select" else []

    @property
    def disabled(self) -> bool:
        return "disabled" in self.attrs

    @property
    def role(self) -> str:
        explicit = self.attrs.get("role", "").strip()
        if explicit in _LEAF:
            return explicit
        tag = self.tag
        if tag == "a" and "href" in self.attrs:
            return "link"
        if tag == "button":
            return "button"
        if tag == "select":
            return "combobox"
        if tag == "textarea":
            return "textbox"
        if re.fullmatch(r"h[1-6]", tag):
            return "heading"
        if tag == "input":
            kind = self.input_type
            if kind in ("submit", "button", "reset"):
                return "button"
            return kind if kind in ("checkbox", "radio") else "textbox"
        return ""

    def name(self) -> str:
        label = _norm(self.attrs.get("aria-label"))
        if label:
            return label
        role = self.role
        if self.tag == "input":
            return _norm(self.value) if role == "button" else _norm(self.attrs.get("placeholder"))
        if role in ("combobox", "textbox"):
            return ""
        return _norm(self.text())

    @property
    def hidden(self) -> bool:
        style = self.attrs.get("style", "").replace(" ", "").lower()
        return (
            "hidden" in self.attrs
            or self.input_type == "hidden"
            or "display:none" in style
            or "visibility:hidden" in style
        )


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.current = self.root

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs}, parent=self.current)
        self.current.children.append(element)
        if tag not in _VOID:
            self.current = element

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:
            self.current = self.current.parent or self.root

    def handle_endtag(self, tag: str) -> None:
        node: Element | None = self.current
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:
            self.current = node.parent

    def handle_data(self, data: str) -> None:
        self.current.children.append(data)


def _init_form_state(root: Element) -> None:
    for el in root.iter():
        if el.tag == "input":
            el.value = el.attrs.get("value", "")
            el.checked = "checked" in el.attrs
        elif el.tag == "textarea":
            el.value = el.text()
        elif el.tag == "select":
            options = el.options
            chosen = next(
                (o for o in options if "selected" in o.attrs), options[0] if options else None
            )
            el.value = chosen.attrs.get("value", _norm(chosen.text())) if chosen else ""


@dataclass
class Page:
    """A parsed page: its URL, title, element tree and bid index."""

    url: str
    status: int
    root: Element
    title: str
    by_bid: dict[str, Element]

    def lines(self) -> list[str]:
        out: list[str] = []
        body = next((e for e in self.root.iter() if e.tag == "body"), self.root)
        _walk(body, out)
        return out


def _describe(el: Element, role: str) -> str:
    line = (f"[{el.bid}] " if el.bid else "") + f"{role} {_quote(el.name())}"
    if role == "textbox":
        line += f" value={_quote(el.value)}"
    if role == "combobox":
        values = ", ".join(_quote(o.attrs.get("value", _norm(o.text()))) for o in el.options)
        line += f" value={_quote(el.value)} options=[{values}]"
    if role in ("checkbox", "radio") and el.checked:
        line += " checked"
    if el.disabled:
        line += " disabled"
    return line


def _walk(el: Element, out: list[str]) -> None:
    if el.tag in _SKIP or el.hidden:
        return
    role = el.role
    if role:
        out.append(_describe(el, role))
        return
    for child in el.children:
        if isinstance(child, str):
            text = _norm(child)
            if text:
                out.append((f"[{el.bid}] " if el.bid else "") + text)
        else:
            _walk(child, out)


def parse_html(html: str, url: str, status: int = 200) -> Page:
    """Parse a response body into a :class:`Page` with initial form state."""
    builder = _TreeBuilder()
    builder.feed(html)
    builder.close()
    root = builder.root
    _init_form_state(root)
    title_el = next((e for e in root.iter() if e.tag == "title"), None)
    by_bid = {el.bid: el for el in root.iter() if el.bid}
    return Page(url, status, root, _norm(title_el.text()) if title_el else "", by_bid)


def format_observation(url: str, title: str, lines: list[str]) -> str:
    """The text both modes return after every action."""
    return "\n".join([f"URL: {url}", f"Title: {title}", "", *lines])
