"""``envhub view`` and ``envhub report``: look at trajectory files in a browser.

The package reads a run file once into an on-disk index (:mod:`.index`), answers every
page from it, and renders pages from shared templates (:mod:`.render`) with server-side
SVG charts (:mod:`.charts`), so the web app (:mod:`.app`) and the self-contained report
(:mod:`.report`) show the same thing. Needs the ``view`` extra (FastAPI, uvicorn, Jinja2).
"""

from __future__ import annotations

from envhub.view.app import create_app as create_app
from envhub.view.catalog import Catalog as Catalog
from envhub.view.index import RunIndex as RunIndex
from envhub.view.report import write_report as write_report

__all__ = ["Catalog", "RunIndex", "create_app", "write_report"]
