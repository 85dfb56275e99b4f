"""The one place errors become HTTP answers: ``{"error": {"code", "message"}}`` plus a status.

Core errors carry their API code (:attr:`envhub.errors.EnvhubError.code`); this module
only maps codes to statuses, turns FastAPI's validation and routing errors into the same
body, and counts every error answer by code.
"""

from __future__ import annotations

import logging

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from envhub.errors import EnvhubError
from envhub.server.metrics import ServerMetrics

__all__ = [
    "STATUS_BY_CODE",
    "describe_envhub_error",
    "envhub_error_response",
    "error_body",
    "install_error_handlers",
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
    "budget_exceeded": 409,
    "payload_too_large": 413,
    "capacity": 429,
    "internal": 500,
    "policy_error": 502,
    "policy_transient": 502,
    "sandbox_error": 503,
    "timeout": 504,
}

_CODE_BY_STATUS = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed",
                   413: "payload_too_large"}

# Clients should come back later rather than hammer a full or broken server.
_RETRY_AFTER = {"capacity": "1", "sandbox_error": "1"}


def error_body(code: str, message: str) -> bytes:
    return orjson.dumps({"error": {"code": code, "message": message}})


def _error_response(metrics: ServerMetrics, status: int, code: str, message: str) -> Response:
    metrics.errors.labels(code).inc()
    headers = {"Retry-After": _RETRY_AFTER[code]} if code in _RETRY_AFTER else None
    return Response(error_body(code, message), status, headers, media_type="application/json")


def _answer(request: Request, status: int, code: str, message: str) -> Response:
    return _error_response(request.app.state.metrics, status, code, message)


def describe_envhub_error(exc: EnvhubError, where: str) -> tuple[int, str, str]:
    """``(status, code, message)`` of a core error, logging server-side failures; shared by
    the HTTP answers and the WebSocket replies so both speak the same codes."""
    status = STATUS_BY_CODE.get(exc.code, 500)
    if status >= 500:
        log.error("%s failed: %s", where, exc, exc_info=exc)
    return status, exc.code, exc.message or str(exc)


def envhub_error_response(exc: EnvhubError, metrics: ServerMetrics, where: str) -> Response:
    """The answer to a core error (also used by the session fast path)."""
    return _error_response(metrics, *describe_envhub_error(exc, where))


async def _envhub_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, EnvhubError)
    where = f"{request.method} {request.url.path}"
    return envhub_error_response(exc, request.app.state.metrics, where)


def _describe_validation(request: Request, exc: RequestValidationError) -> str:
    parts = []
    content_type = request.headers.get("content-type", "")
    if request.method == "POST" and "json" not in content_type:
        parts.append("send the body as JSON with Content-Type: application/json")
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()))
        detail = err.get("msg", "invalid")
        if err.get("type") == "json_invalid":
            detail = f"malformed JSON ({err.get('ctx', {}).get('error', 'decode error')})"
        parts.append(f"{where}: {detail}" if where else detail)
    return "; ".join(parts) or "invalid request"


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    return _answer(request, 422, "invalid_request", _describe_validation(request, exc))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _CODE_BY_STATUS.get(exc.status_code, f"http_{exc.status_code}")
    return _answer(request, exc.status_code, code, str(exc.detail))


async def _unexpected_error(request: Request, exc: Exception) -> Response:
    log.error("%s %s crashed", request.method, request.url.path, exc_info=exc)
    return _answer(request, 500, "internal", f"internal server error ({type(exc).__name__})")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(EnvhubError, _envhub_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)
