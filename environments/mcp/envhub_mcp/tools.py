"""An MCP server's tools as envhub tools: the server's JSON schema is what the model sees
and what arguments are checked against, and the rendered result is the observation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import jsonschema
import mcp_types
from jsonschema.exceptions import best_match
from pydantic import BaseModel

from envhub import ToolSpec
from envhub.errors import ToolArgumentError

__all__ = ["ServerTool", "render_result", "server_tool"]

#: the environment method every server tool is dispatched to, as ``(tool=, arguments=)``
FORWARD_ATTR = "call_server_tool"


class ForwardedCall(BaseModel):
    """The keyword arguments :data:`FORWARD_ATTR` receives for one call."""

    tool: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ServerTool(ToolSpec):
    """A tool the MCP server listed. The session validates the model's arguments with
    :meth:`validate` (against the server's ``inputSchema``, so a malformed call is an
    ``invalid_arguments`` error without a round trip) and then calls the environment's
    ``call_server_tool(tool=..., arguments=...)``."""

    input_schema: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def schema(self) -> dict[str, Any]:
        parameters = dict(self.input_schema) or {"type": "object", "properties": {}}
        parameters.setdefault("properties", {})
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": parameters,
            },
        }

    @cached_property
    def _validator(self) -> jsonschema.protocols.Validator:
        cls = jsonschema.validators.validator_for(self.input_schema)
        return cls(self.input_schema)

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        error = best_match(self._validator.iter_errors(arguments))
        if error is not None:
            where = ".".join(str(p) for p in error.absolute_path) or "arguments"
            raise ToolArgumentError(f"invalid arguments for {self.name}: {where}: {error.message}")
        self._check_sendable(arguments)
        return {"tool": self.name, "arguments": arguments}

    def _check_sendable(self, arguments: dict[str, Any]) -> None:
        """Arguments the transport cannot encode are the model's error: JSON tool-call
        arguments may carry unpaired surrogates (``"\\ud800"``), which no UTF-8 stream
        can send, and a stdio or HTTP transport that meets one drops the connection
        (a lost server: the episode would be masked)."""
        try:
            json.dumps(arguments, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ToolArgumentError(
                f"invalid arguments for {self.name}: a string is not valid Unicode "
                "(an unpaired surrogate)"
            ) from None


def server_tool(tool: mcp_types.Tool) -> ServerTool:
    """The envhub spec of one listed tool."""
    return ServerTool(
        name=tool.name,
        description=tool.description or tool.title or tool.name,
        attr=FORWARD_ATTR,
        args_model=ForwardedCall,
        terminal=False,
        timeout=None,
        is_async=True,
        input_schema=dict(tool.input_schema),
    )


def render_result(result: mcp_types.CallToolResult) -> str:
    """The observation text of a tool result: text blocks (and text resources) joined by
    newlines, a placeholder naming any other block, the structured content when there is
    no text at all."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.EmbeddedResource) and isinstance(
            block.resource, mcp_types.TextResourceContents
        ):
            parts.append(block.resource.text)
        elif isinstance(block, mcp_types.ResourceLink):
            parts.append(f"[resource {block.uri}]")
        else:
            parts.append(f"[{block.type} content, {getattr(block, 'mime_type', 'unknown type')}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return "\n".join(parts)
