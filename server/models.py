"""Bodies only the HTTP server has: the environment list and error bodies.

Every other request and response body (``EnvironmentInfo``, ``TaskPage``, ``Health``,
``CreateSession``, ``StepRequest``, the session results) is a core wire type in
:mod:`envhub.types`, shared with the in-process session and the clients; the server
imports those from there.
"""

from __future__ import annotations

from pydantic import BaseModel

from envhub.types import EnvironmentInfo

__all__ = ["EnvironmentList", "ErrorBody", "ErrorDetail"]


class EnvironmentList(BaseModel):
    environments: list[EnvironmentInfo]


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorBody(BaseModel):
    """Every non-2xx answer of the API has this body."""

    error: ErrorDetail
