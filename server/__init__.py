"""envhub's HTTP server: environments hosted as sessions behind one function-call API.

``create_app(envs, ...)`` builds the FastAPI app; ``envhub serve`` runs it with uvicorn.
Modules: ``app`` (assembly), ``routes/`` (one router per resource), ``store`` (sessions,
capacity, idempotency, reaper), ``errors`` (codes to statuses), ``middleware`` (auth,
body size), ``metrics`` (Prometheus), ``models`` (HTTP-only bodies),
``fastpath`` (step/close without FastAPI), ``websocket`` (step/close over one socket).
"""

from __future__ import annotations

from envhub.server.app import create_app as create_app

__all__ = ["create_app"]
