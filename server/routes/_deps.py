"""What every route needs from the app, without FastAPI dependency-injection overhead."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from envhub.server.models import ErrorBody
from envhub.server.store import SessionStore

__all__ = ["ERRORS", "store_of"]


def store_of(request: Request) -> SessionStore:
    store: SessionStore = request.app.state.store  # set by create_app
    return store


def ERRORS(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses=`` entry documenting the error body for these statuses."""
    return {status: {"model": ErrorBody} for status in statuses}
