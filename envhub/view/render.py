"""Templates (Jinja2, package data) shared by the web app and the HTML report.

The two differ only in where links point: the app links to its pages, the report to
anchors inside itself and nowhere else (:class:`Links` and its two implementations).
The stylesheet is inlined into every page, so neither needs a static route or a request.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any, Protocol
from urllib.parse import quote, urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

__all__ = ["AppLinks", "Links", "ReportLinks", "render"]


class Links(Protocol):
    """Where a page's links go; ``None`` means the target does not exist here."""

    def runs(self) -> str | None: ...
    def run(self, run: int) -> str | None: ...
    def episodes(self, run: int, **query: Any) -> str | None: ...
    def episode(self, run: int, episode_id: int, **query: Any) -> str: ...
    def task(self, run: int, task_id: str) -> str | None: ...
    def tree(self, run: int, tree_id: str) -> str | None: ...


class AppLinks:
    def runs(self) -> str:
        return "/"

    def run(self, run: int) -> str:
        return f"/runs/{run}"

    def episodes(self, run: int, **query: Any) -> str:
        return f"/runs/{run}/episodes" + _query(query)

    def episode(self, run: int, episode_id: int, **query: Any) -> str:
        """The episode page; ``query`` names the list it was reached from (filters and
        sort), which its previous and next links walk."""
        return f"/runs/{run}/episodes/{episode_id}" + _query(query)

    def task(self, run: int, task_id: str) -> str:
        return self.episodes(run, task=task_id)

    def tree(self, run: int, tree_id: str) -> str:
        return f"/runs/{run}/trees/{quote(tree_id, safe='')}"


class ReportLinks:
    """Links inside one self-contained report: episodes it holds are anchors."""

    def runs(self) -> None:
        return None

    def run(self, run: int) -> str:
        return "#run"

    def episodes(self, run: int, **query: Any) -> None:
        return None

    def episode(self, run: int, episode_id: int, **query: Any) -> str:
        return f"#episode-{episode_id}"

    def task(self, run: int, task_id: str) -> None:
        return None

    def tree(self, run: int, tree_id: str) -> None:
        return None


def _query(query: dict[str, Any]) -> str:
    params = {k: v for k, v in query.items() if v is not None and v != ""}
    return f"?{urlencode(params)}" if params else ""


def _number(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _seconds(value: float | None) -> str:
    if value is None:
        return "–"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s"
    return f"{value / 60:.1f} min"


@cache
def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("envhub.view", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["number"] = _number
    env.filters["seconds"] = _seconds
    env.globals["css"] = Markup(
        resources.files("envhub.view").joinpath("static/view.css").read_text("utf-8")
    )
    return env


def render(template: str, **context: Any) -> str:
    """A page; ``context`` needs ``links`` (a :class:`Links`) and ``title``."""
    context.setdefault("poll_url", None)
    context.setdefault("version", None)
    return _environment().get_template(template).render(**context)
