"""envhub environments as MCP servers (``pip install 'envhub-rl[mcp]'``).

:mod:`envhub.mcp.door` maps one open session of any transport to an MCP server;
:mod:`envhub.mcp.http` serves sessions over Streamable HTTP (a hosted endpoint per
environment, ``envhub serve --mcp``); :mod:`envhub.mcp.stdio` serves one over stdio
(``envhub mcp ENV``). The ``mcp`` SDK is imported by those modules, not here.
"""

from __future__ import annotations

__all__: list[str] = []
