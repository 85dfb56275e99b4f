"""Wire-model validation worded once, for every transport.

The server answers a request that fails its schema with ``invalid_request`` and the
message :func:`validation_message` writes; the in-process transport raises
:class:`~envhub.errors.InvalidRequest` with the same message for the same input (a
client-chosen session id, a step's calls and ``request_id``), so a caller meets one
error, worded one way, whichever transport it holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError

from envhub.errors import InvalidRequest
from envhub.types import (
    MAX_REQUEST_ID,
    SESSION_ID_PATTERN,
    ForkRequest,
    StepRequest,
    ToolCall,
)

__all__ = [
    "check_session_id",
    "fork_request",
    "invalid_request",
    "malformed_json",
    "step_calls",
    "step_request",
    "validation_message",
]

_SESSION_ID: TypeAdapter[str] = TypeAdapter(Annotated[str, Field(pattern=SESSION_ID_PATTERN)])


def validation_message(errors: Iterable[Mapping[str, Any]], hint: str | None = None) -> str:
    """The first five of pydantic's ``errors()`` as ``field.path: what is wrong``, after
    ``hint`` when there is one. A leading ``body`` in FastAPI's locations is dropped, so
    a field reads the same on every door."""
    parts = [hint] if hint else []
    for err in list(errors)[:5]:
        loc = tuple(err.get("loc", ()))
        loc = loc[1:] if loc[:1] == ("body",) else loc
        if err.get("type") == "json_invalid":  # FastAPI puts the character offset in loc
            reason = err.get("ctx", {}).get("error", "decode error")
            parts.append(malformed_json(f"{reason} at char {loc[0]}" if loc else reason))
            continue
        where = ".".join(str(p) for p in loc)
        detail = str(err.get("msg", "invalid"))
        parts.append(f"{where}: {detail}" if where else detail)
    return "; ".join(parts) or "invalid request"


def malformed_json(reason: object) -> str:
    return f"malformed JSON ({reason})"


def invalid_request(exc: ValidationError, field: str | None = None) -> InvalidRequest:
    """The :class:`~envhub.errors.InvalidRequest` a server's 422 for ``exc`` maps to;
    ``field`` names the value when ``exc`` came from validating it alone."""
    errors: list[Mapping[str, Any]] = list(exc.errors())
    if field is not None:
        errors = [{**err, "loc": (field, *err["loc"])} for err in errors]
    return InvalidRequest(validation_message(errors))


def check_session_id(session_id: str) -> None:
    """Refuse a client-chosen session id the HTTP API would refuse (it appears in URL
    paths: :data:`~envhub.types.SESSION_ID_PATTERN`)."""
    try:
        _SESSION_ID.validate_python(session_id)
    except ValidationError as exc:
        raise invalid_request(exc, "session_id") from None


def step_calls(
    tool_calls: Sequence[ToolCall | dict[str, Any]],
    content: str | None,
    request_id: str | None,
) -> list[ToolCall]:
    """One assistant turn's calls, the turn checked by the server's wire model
    (:class:`~envhub.types.StepRequest`) and refused as the server refuses it
    (:class:`~envhub.errors.InvalidRequest`, its wording). A turn of :class:`ToolCall`
    objects with a text and ``request_id`` that fit, which the model cannot refuse, skips
    the model: the hot path of every transport's ``step``."""
    typed = [c for c in tool_calls if isinstance(c, ToolCall)]
    if (
        len(typed) == len(tool_calls)
        and (content is None or isinstance(content, str))
        and (request_id is None or (isinstance(request_id, str)
                                    and len(request_id) <= MAX_REQUEST_ID))
    ):
        return typed
    try:
        turn = StepRequest.model_validate(
            {"tool_calls": tool_calls, "content": content, "request_id": request_id}
        )
    except ValidationError as exc:
        raise invalid_request(exc) from None
    return turn.tool_calls


def step_request(
    tool_calls: Sequence[ToolCall | dict[str, Any]],
    content: str | None,
    request_id: str | None,
) -> StepRequest:
    """The turn as a :class:`~envhub.types.StepRequest` to send, checked by
    :func:`step_calls` (so it is built without validating twice)."""
    calls = step_calls(tool_calls, content, request_id)
    return StepRequest.model_construct(tool_calls=calls, content=content, request_id=request_id)


def fork_request(n: int, fork_id: str | None) -> ForkRequest:
    """A fork's arguments checked by the server's wire model
    (:class:`~envhub.types.ForkRequest`: ``n`` children within
    :data:`~envhub.types.MAX_FORK`, a ``fork_id`` that can name them) and refused as the
    server refuses them, on every transport."""
    try:
        return ForkRequest.model_validate({"n": n, "fork_id": fork_id})
    except ValidationError as exc:
        raise invalid_request(exc) from None
