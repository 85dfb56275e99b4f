"""The ``envhub view`` web app: server-rendered pages over the catalog's indexes.

Every page is HTML with inline CSS and SVG; the only script is the live poll of
``/api/poll``, which answers from the indexes (each call reads only the bytes appended
to the files since the last one). While the app runs, a thread reads big files to their
end and follows appended lines (:meth:`~envhub.view.catalog.Catalog.follow`). Errors are
pages with a code and the HTTP status that fits it; ``/api/*`` errors are
``{"error": {"code", "message"}}``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, cast, get_args

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import ValidationError

from envhub.errors import EnvhubError, InvalidRequest
from envhub.server.hosts import HostAllowList, TrustedHosts
from envhub.view import pages
from envhub.view.catalog import Catalog
from envhub.view.filters import EpisodeFilter, EpisodeOrder
from envhub.view.render import AppLinks, render
from envhub.view.token_text import Decoder, decode_ids

__all__ = ["create_app"]

_STATUS = {
    "unknown_run": 404, "unknown_episode": 404, "not_found": 404, "is_directory": 404,
    "unreadable": 404, "invalid_request": 400, "file_changed": 409,
}  # fmt: skip
_LINKS = AppLinks()


def _episode_query(request: Request) -> tuple[EpisodeFilter, EpisodeOrder, int]:
    params = dict(request.query_params)
    sort = params.pop("sort", "line") or "line"
    if sort not in get_args(EpisodeOrder):
        raise InvalidRequest(f"unknown sort {sort!r}: one of {', '.join(get_args(EpisodeOrder))}")
    order = cast("EpisodeOrder", sort)
    raw_page = params.pop("page", "1") or "1"
    if not raw_page.isdigit():
        raise InvalidRequest(f"page must be a positive number, got {raw_page!r}")
    try:
        where = EpisodeFilter.model_validate(params)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise InvalidRequest(f"bad filter: {problems}") from None
    return where, order, int(raw_page)


def create_app(
    catalog: Catalog, decoder: Decoder | None = None, *, host: str = "127.0.0.1"
) -> FastAPI:
    """The app over ``catalog``; ``decoder`` turns token ids into text (default: ids).

    Requests must name ``host`` (the address the app listens on) or a loopback name in
    their ``Host`` header, else they get 400: a web page whose domain was re-pointed at
    127.0.0.1 (DNS rebinding) cannot read trajectories. Listening on every address
    (``0.0.0.0``, ``::``) accepts any name, since the operator chose to expose the app.
    The server's rule (:mod:`envhub.server.hosts`), so a browser ``Origin`` of another
    site is refused too."""

    @asynccontextmanager
    async def follow_files(app: FastAPI) -> AsyncIterator[None]:
        stop = threading.Event()
        follower = threading.Thread(
            target=catalog.follow, args=(stop.is_set,), name="envhub-view-follow", daemon=True
        )
        follower.start()
        yield
        stop.set()
        await asyncio.to_thread(follower.join, 10)

    app = FastAPI(
        title="envhub view", docs_url=None, redoc_url=None, openapi_url=None,
        lifespan=follow_files,
    )  # fmt: skip
    app.add_middleware(TrustedHosts, allowed=HostAllowList.for_bind(host))

    @app.middleware("http")
    async def requests_first(request: Request, call_next: Any) -> Response:
        with catalog.serving():  # the follower reads no new chunk meanwhile
            response: Response = await call_next(request)
        return response

    decoded = decoder is not None
    decode = decoder or decode_ids

    def page(
        template: str, build: Callable[[], dict[str, Any]], live: bool = True, **extra: Any
    ) -> HTMLResponse:
        """A page; a live one carries the version read *before* its data, so a line
        indexed meanwhile makes the next poll reload it rather than go unseen."""
        version = _version(_states(catalog, refresh=False)) if live else None
        context = build()
        if live:
            context.update(poll_url="/api/poll", version=version)
        return HTMLResponse(render(template, links=_LINKS, **context, **extra))

    @app.exception_handler(EnvhubError)
    async def _envhub_error(request: Request, exc: EnvhubError) -> Response:
        status = _STATUS.get(exc.code, 500)
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": {"code": exc.code, "message": str(exc)}}, status)
        html = render("error.html", links=_LINKS, title="error", code=exc.code, message=str(exc))
        return HTMLResponse(html, status)

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError) -> Response:
        return await _envhub_error(request, InvalidRequest(f"bad request: {exc.errors()}"))

    @app.get("/", response_class=HTMLResponse)
    def runs() -> HTMLResponse:
        return page("runs.html", lambda: pages.runs_context(catalog))

    @app.get("/runs/{run}", response_class=HTMLResponse)
    def run(request: Request, run: int, task_sort: pages.TaskSort = "success") -> HTMLResponse:
        def sort_link(key: str) -> str:
            return f"/runs/{run}?task_sort={'-' if task_sort == key else ''}{key}"

        return page(
            "run.html", lambda: pages.run_context(catalog, run, task_sort), sort_link=sort_link
        )

    @app.get("/runs/{run}/episodes", response_class=HTMLResponse)
    def episodes(request: Request, run: int) -> HTMLResponse:
        where, sort, number = _episode_query(request)

        def page_link(n: int) -> str:
            return _LINKS.episodes(run, **where.query(), sort=sort, page=n)

        return page(
            "episodes.html",
            lambda: pages.episodes_context(catalog, run, where, sort, number),
            page_link=page_link,
        )

    @app.get("/runs/{run}/episodes/{episode_id}", response_class=HTMLResponse)
    def episode(request: Request, run: int, episode_id: int) -> HTMLResponse:
        where, sort, _ = _episode_query(request)  # the list it was reached from
        return page(
            "episode.html",
            lambda: pages.episode_context(catalog, run, episode_id, decode, decoded, where, sort),
            live=False,
        )

    @app.get("/runs/{run}/trees/{tree_id}", response_class=HTMLResponse)
    def tree(run: int, tree_id: str) -> HTMLResponse:
        return page("tree.html", lambda: pages.tree_context(catalog, run, tree_id))

    @app.get("/compare", response_class=HTMLResponse)
    def compare(a: int, b: int) -> HTMLResponse:
        return page("compare.html", lambda: pages.compare_context(catalog, a, b))

    @app.get("/compare/task", response_class=HTMLResponse)
    def compare_task(a: int, b: int, task_id: str) -> HTMLResponse:
        return page(
            "compare_task.html",
            lambda: pages.compare_task_context(catalog, a, b, task_id, decode, decoded),
            live=False,
        )

    @app.get("/api/poll")
    def poll() -> dict[str, Any]:
        """What changed since a page was drawn: the pages reload when ``version`` differs."""
        states = _states(catalog, refresh=True)
        return {"version": _version(states), "runs": states}

    @app.get("/api/runs/{run}/episodes")
    def episodes_json(request: Request, run: int) -> dict[str, Any]:
        where, sort, number = _episode_query(request)
        context = pages.episodes_context(catalog, run, where, sort, number)
        return {
            "total": context["total"],
            "page": context["page"],
            "pages": context["pages"],
            "episodes": [vars(e) for e in context["episodes"]],
        }

    @app.get("/api/runs/{run}/summary")
    def summary_json(run: int) -> dict[str, Any]:
        return catalog.stats(run).summary.model_dump(mode="json")

    return app


def _states(catalog: Catalog, *, refresh: bool) -> list[dict[str, Any]]:
    states: list[dict[str, Any]] = []
    for entry in catalog.runs:
        try:
            state = catalog.index(entry.number, refresh=refresh).state()
        except EnvhubError as exc:
            states.append(
                {"path": str(entry.path), "error": {"code": exc.code, "message": str(exc)}}
            )
            continue
        states.append(
            {
                "path": str(entry.path),
                **vars(state),
                "version": state.version,
                "behind": state.behind,
            }
        )
    return states


def _version(states: list[dict[str, Any]]) -> str:
    return ";".join(s.get("version") or s["error"]["code"] for s in states)
