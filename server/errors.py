"""The one place errors become answers: ``{"error": {"code", "message"}}`` plus a status.

Core errors carry their API code (:attr:`envhub.errors.EnvhubError.code`); this module
maps codes to statuses, words validation failures and crashes, turns FastAPI's
validation and routing errors into the same body, and counts every error answer by code.
The ``describe_*`` functions give ``(status, code, message)`` for every door: the FastAPI
routes, the session fast path and the WebSocket replies.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from envhub.errors import EnvhubError
from envhub.runtime.validation import malformed_json, validation_message
from envhub.server.metrics import ServerMetrics

__all__ = [
    "STATUS_BY_CODE",
    "VALIDATION_STATUS",
    "Described",
    "describe_envhub_error",
    "describe_unexpected",
    "describe_validation",
    "envhub_error_response",
    "error_body",
    "error_response",
    "install_error_handlers",
    "malformed_json",
    "unexpected_error_response",
]

log = logging.getLogger("envhub.server")

STATUS_BY_CODE: dict[str, int] = {
    "invalid_request": 400,
    "unauthorized": 401,
    "unknown_environment": 404,
    "unknown_task": 404,
    "session_not_found": 404,
    "not_found": 404,
    "method_not_allowed": 405,
    "session_closed": 409,
    "not_deterministic": 409,
    "payload_too_large": 413,
    "capacity": 429,
    "internal": 500,
    "judge_error": 500,  # the environment's judge failed: not a proxy's 502, never retried
    "user_simulator_error": 500,  # its user's model failed, after its retries: as judge_error
    "policy_error": 502,
    "policy_transient": 502,
    "sandbox_error": 503,
    "timeout": 504,
}

_CODE_BY_STATUS = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed",
                   413: "payload_too_large"}

# A body that fails its schema; core ``InvalidRequest`` errors (refused options) are 400.
VALIDATION_STATUS = 422

# Clients should come back later rather than hammer a full or broken server.
_RETRY_AFTER = {"capacity": "1", "sandbox_error": "1"}

Described = tuple[int, str, str]
"""``(status, code, message)`` of an error answer."""


def error_body(code: str, message: str) -> bytes:
    return orjson.dumps({"error": {"code": code, "message": message}})


def error_response(status: int, code: str, message: str,
                   headers: Mapping[str, str] | None = None) -> Response:
    """An error answer, not yet counted; also an ASGI app, for the pure ASGI layers."""
    fields = dict(headers or {})
    if code in _RETRY_AFTER:
        fields["Retry-After"] = _RETRY_AFTER[code]
    return Response(error_body(code, message), status, fields, media_type="application/json")


def _error_response(metrics: ServerMetrics, status: int, code: str, message: str) -> Response:
    metrics.errors.labels(code).inc()
    return error_response(status, code, message)


def _answer(request: Request, status: int, code: str, message: str) -> Response:
    return _error_response(request.app.state.metrics, status, code, message)


def describe_envhub_error(exc: EnvhubError, where: str) -> Described:
    """A core error's answer, logging server-side failures."""
    status = STATUS_BY_CODE.get(exc.code, 500)
    if status >= 500:
        log.error("%s failed: %s", where, exc, exc_info=exc)
    return status, exc.code, exc.message or str(exc)


def describe_unexpected(exc: BaseException, where: str) -> Described:
    """A crash's answer: logged with its traceback here, only its type named to the client."""
    log.error("%s crashed", where, exc_info=exc)
    return 500, "internal", f"internal server error ({type(exc).__name__})"


def describe_validation(errors: Iterable[Mapping[str, Any]], hint: str | None = None
                        ) -> Described:
    """A body or message that fails its schema, worded by the core
    (:func:`envhub.runtime.validation.validation_message`) as the in-process transport words it."""
    return VALIDATION_STATUS, "invalid_request", validation_message(errors, hint)


def envhub_error_response(exc: EnvhubError, metrics: ServerMetrics, where: str) -> Response:
    """The answer to a core error (also used by the session fast path)."""
    return _error_response(metrics, *describe_envhub_error(exc, where))


def unexpected_error_response(exc: Exception, metrics: ServerMetrics, where: str) -> Response:
    """The answer to a crash, for the session fast path (the routes' handler gives it too)."""
    return _error_response(metrics, *describe_unexpected(exc, where))


async def _envhub_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, EnvhubError)
    where = f"{request.method} {request.url.path}"
    return envhub_error_response(exc, request.app.state.metrics, where)


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    hint = None
    if request.method == "POST" and "json" not in request.headers.get("content-type", ""):
        hint = "send the body as JSON with Content-Type: application/json"
    return _answer(request, *describe_validation(exc.errors(), hint))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _CODE_BY_STATUS.get(exc.status_code, f"http_{exc.status_code}")
    return _answer(request, exc.status_code, code, str(exc.detail))


async def _unexpected_error(request: Request, exc: Exception) -> Response:
    where = f"{request.method} {request.url.path}"
    return unexpected_error_response(exc, request.app.state.metrics, where)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(EnvhubError, _envhub_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)
