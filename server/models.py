"""Bodies only the HTTP server has: health, the environment list and error bodies.

Every other request and response body (``EnvironmentInfo``, ``TaskPage``,
``CreateSession``, ``StepRequest``, the session results) is a core wire type in
:mod:`envhub.types`, shared with the in-process session and the clients; the server
imports those from there.
"""

from __future__ import annotations

from pydantic import BaseModel

from envhub.types import EnvironmentInfo

__all__ = ["EnvironmentList", "ErrorBody", "ErrorDetail", "Health"]


class Health(BaseModel):
    """Liveness plus load: a balancer in front of several servers (``envhub.fleet``)
    weighs replicas by ``sessions / max_sessions``, counting every client's sessions."""

    status: str = "ok"
    version: str
    sessions: int = 0
    max_sessions: int = 0


class EnvironmentList(BaseModel):
    environments: list[EnvironmentInfo]


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorBody(BaseModel):
    """Every non-2xx answer of the API has this body."""

    error: ErrorDetail
