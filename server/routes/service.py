"""Liveness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from envhub import __version__
from envhub.server.metrics import CONTENT_TYPE_LATEST
from envhub.types import Health

__all__ = ["router"]

router = APIRouter(tags=["service"])


@router.get("/health")
async def health(request: Request) -> Health:
    """Liveness and load (open sessions of the maximum); stays open when a bearer token
    is required, so a load balancer's probe needs none (counts only, nothing else)."""
    store = request.app.state.store
    return Health(
        version=__version__, sessions=store.open_sessions, max_sessions=store.max_sessions
    )


@router.get(
    "/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}}
)
async def metrics(request: Request) -> Response:
    """Prometheus text format: sessions, steps, latencies, errors by code, tool errors by kind."""
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
