"""The API's routers, one module per resource."""

from __future__ import annotations

from envhub.server.routes.environments import router as environments_router
from envhub.server.routes.service import router as service_router
from envhub.server.routes.sessions import router as sessions_router

__all__ = ["environments_router", "service_router", "sessions_router"]
