"""The process-wide MiniShop server: uvicorn on 127.0.0.1 and a free port.

One server per catalog (seed, size) and process, started on the runtime loop the
first time a session needs it and shared by all sessions after that; per-visitor
state is keyed by the session cookie. MiniWoB++ pages, when the ``miniwob`` package
is installed, are served by the same server under ``/miniwob/``.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from pathlib import Path

from envhub.runtime.loop_thread import serve_in_loop
from envhub_web.catalog import Catalog, load_catalog
from envhub_web.runtime import add_shutdown_hook, runtime
from envhub_web.state import SessionStore

__all__ = ["Site", "get_site", "miniwob_html_dir"]


@dataclass(frozen=True)
class Site:
    base_url: str
    catalog: Catalog
    store: SessionStore


def miniwob_html_dir() -> Path | None:
    """The HTML directory shipped in the ``miniwob`` wheel, if it is installed."""
    try:
        import miniwob
    except ImportError:
        return None
    path = Path(miniwob.__file__).parent / "html"
    return path if path.is_dir() else None


async def _start(seed: int, size: int) -> Site:
    from envhub_web.site import create_app

    catalog = await asyncio.to_thread(load_catalog, seed, size)
    store = SessionStore()
    static = {"/miniwob": html} if (html := miniwob_html_dir()) else {}
    app = create_app(catalog, store, static)
    server = contextlib.AsyncExitStack()
    url = await server.enter_async_context(
        serve_in_loop(app, lifespan="off", timeout_graceful_shutdown=2)
    )
    add_shutdown_hook(server.aclose)
    return Site(url, catalog, store)


async def get_site(seed: int = 0, size: int = 3000) -> Site:
    """The running site for this catalog, started on first use (from any event loop)."""
    return await runtime().service(("site", seed, size), lambda: _start(seed, size))
