"""What the MCP door's lean path answers (:mod:`envhub.mcp.http`): the requests it
recognises as plainly well formed, exactly as the SDK's transport and server accept them
without a word, and the wire forms it answers with where they differ from a model dump.
Anything these do not recognise is the SDK's to answer."""

from __future__ import annotations

from typing import Any, TypeGuard

import pydantic_core
from mcp.server.runner import ServerRunner
from mcp.types import CallToolResult, TextContent
from mcp.types.version import LATEST_HANDSHAKE_VERSION
from mcp_types.methods import validate_client_request
from pydantic import ValidationError

__all__ = [
    "SEED_META",
    "TASK_ID_META",
    "is_request_id",
    "lean_initialize",
    "lean_request",
    "text_result_wire",
]

#: the ``_meta`` keys of an initialize that choose the episode's task (:mod:`envhub.mcp.http`)
TASK_ID_META = "envhub/task_id"
SEED_META = "envhub/seed"

_LEAN_FIELDS = frozenset({"jsonrpc", "id", "method", "params"})
_INITIALIZE_FIELDS = frozenset({"protocolVersion", "capabilities", "clientInfo", "_meta"})


def is_request_id(value: Any) -> TypeGuard[str | int]:
    """Whether ``value`` is a JSON-RPC request id as the SDK takes one: a string or an
    integer (a JSON ``true`` is no id, though Python's bool is an int)."""
    return isinstance(value, str | int) and not isinstance(value, bool)


def lean_request(headers: dict[bytes, bytes], body: bytes
                 ) -> tuple[str | int | None, str, dict[str, Any]] | None:
    """``(id, method, params)`` of a request the lean path answers, else ``None``: a
    ``tools/list`` without parameters, a ``tools/call`` with a string ``name`` and an
    object of ``arguments`` (or none), or ``notifications/initialized`` (id ``None``)
    without parameters, nothing else in any, in a JSON body that says it is JSON to a
    client that accepts JSON."""
    message = _lean_message(headers, body)
    if message is None:
        return None
    method, params = message.get("method"), message.get("params", {})
    if "id" not in message:
        if method == "notifications/initialized" and params == {}:
            return None, method, params
        return None
    request_id = message["id"]
    if not is_request_id(request_id):
        return None
    if method == "tools/list" and params == {}:
        return request_id, method, params
    if (method == "tools/call" and isinstance(params, dict)
            and not params.keys() - {"name", "arguments"}
            and isinstance(params.get("name"), str)
            and isinstance(params.get("arguments", {}), dict)):
        return request_id, method, params
    return None


def _lean_message(headers: dict[bytes, bytes], body: bytes) -> dict[str, Any] | None:
    """The JSON-RPC message object of ``body`` when :func:`_lean_envelope` takes it."""
    try:
        message = pydantic_core.from_json(body)
    except ValueError:
        return None
    return message if _lean_envelope(headers, message) else None


def _lean_envelope(headers: dict[bytes, bytes], message: Any) -> bool:
    """Whether the headers and the envelope are what the SDK's transport takes without a
    word: a JSON content type, an Accept naming JSON, a JSON-RPC 2.0 object with no field
    but ``jsonrpc``, ``id``, ``method`` and ``params``."""
    return (headers.get(b"content-type", b"").split(b";")[0].strip() == b"application/json"
            and _accepts_json(headers.get(b"accept", b""))
            and isinstance(message, dict) and not message.keys() - _LEAN_FIELDS
            and message.get("jsonrpc") == "2.0")


def lean_initialize(headers: dict[bytes, bytes], message: dict[str, Any]
                    ) -> tuple[str | int, str] | None:
    """``(id, negotiated protocol version)`` of an ``initialize`` request the lean path
    answers, else ``None`` (the SDK's transport answers it): the envelope and headers
    :func:`_lean_envelope` takes, parameters of the protocol's fields (``_meta`` naming
    only the task) that the SDK's own validation accepts, negotiated by the SDK's rule."""
    if not _lean_envelope(headers, message):
        return None
    request_id, params = message.get("id"), message.get("params")
    if (not is_request_id(request_id)
            or not isinstance(params, dict) or params.keys() - _INITIALIZE_FIELDS):
        return None
    meta = params.get("_meta", {})
    if not isinstance(meta, dict) or meta.keys() - {TASK_ID_META, SEED_META}:
        return None
    try:
        validate_client_request("initialize", LATEST_HANDSHAKE_VERSION, params)
        _, version = ServerRunner._negotiate_initialize(params)
    except (ValidationError, KeyError):
        return None
    return request_id, version


def text_result_wire(result: CallToolResult) -> dict[str, Any] | None:
    """The wire form of a tool result of plain text content, exactly as the SDK's version
    sieve (:func:`mcp_types.methods.serialize_server_result`) gives it in every handshake
    version (``tests/mcp/test_http_lean.py`` holds the two equal); ``None`` for any other
    result, which the sieve then shapes."""
    if result.structured_content is not None or result.model_extra:
        return None
    content = []
    for part in result.content:
        if type(part) is not TextContent or part.annotations is not None or part.meta is not None:
            return None
        content.append({"text": part.text, "type": "text"})
    wire: dict[str, Any] = {} if result.meta is None else {"_meta": result.meta}
    wire["content"] = content
    if result.is_error is not None:
        wire["isError"] = result.is_error
    return wire


def _accepts_json(accept: bytes) -> bool:
    """The SDK transport's test (:func:`mcp.server.streamable_http.check_accept_headers`)
    that a JSON answer is acceptable."""
    types_ = {part.split(b";")[0].strip().lower() for part in accept.split(b",")}
    return bool(types_ & {b"*/*", b"application/json", b"application/*"})
