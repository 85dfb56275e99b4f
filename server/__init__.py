"""envhub's HTTP server: environments hosted as sessions behind one function-call API.

``create_app(envs, ...)`` builds the FastAPI app; ``build_app(envs, options, ...)`` makes
the environments with options and budgets first, and is what ``envhub serve`` and every
fleet replica run with uvicorn.
Three doors serve the session calls: ``routes/`` (FastAPI, one router per resource, the
documented API), ``fastpath`` (step/close without FastAPI) and ``websocket`` (every call
over one socket). All three sit behind ``auth`` (bearer token) and ``limits`` (size), call
``store``'s one method per verb (sessions, capacity, idempotency, reaper) and word errors
through ``errors`` (codes to statuses, validation messages). Also ``app`` (assembly),
``metrics`` (Prometheus), ``models`` (HTTP-only bodies).
"""

from __future__ import annotations

from envhub.server.app import build_app as build_app
from envhub.server.app import create_app as create_app
from envhub.server.app import raise_open_files_limit as raise_open_files_limit

__all__ = ["build_app", "create_app", "raise_open_files_limit"]
