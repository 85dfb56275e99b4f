"""envhub's HTTP server: environments hosted as sessions behind one function-call API.

``create_app(envs, ...)`` builds the FastAPI app; ``envhub serve`` runs it with uvicorn.
Three doors serve the session calls: ``routes/`` (FastAPI, one router per resource, the
documented API), ``fastpath`` (step/close without FastAPI) and ``websocket`` (every call
over one socket). All three sit behind ``auth`` (bearer token) and ``limits`` (size), call
``store``'s one method per verb (sessions, capacity, idempotency, reaper) and word errors
through ``errors`` (codes to statuses, validation messages). Also ``app`` (assembly),
``metrics`` (Prometheus), ``models`` (HTTP-only bodies).
"""

from __future__ import annotations

from envhub.server.app import create_app as create_app

__all__ = ["create_app"]
