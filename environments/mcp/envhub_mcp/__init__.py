"""envhub-rl-mcp: any MCP server as an envhub environment.

``MCPEnvironment`` is the base class for plugins that wrap a server; ``MCPEnv`` (the
``mcp`` environment) wraps one from options or runs a shipped task set.
"""

from envhub_mcp.base import MCPEnvironment as MCPEnvironment
from envhub_mcp.connection import ServerToolError as ServerToolError
from envhub_mcp.env import MCPEnv as MCPEnv
from envhub_mcp.scoring import CallRecord as CallRecord
from envhub_mcp.scoring import Scorer as Scorer
from envhub_mcp.servers import HttpServer as HttpServer
from envhub_mcp.servers import StdioServer as StdioServer
from envhub_mcp.tasksets import TASK_SETS as TASK_SETS

__all__ = [
    "TASK_SETS",
    "CallRecord",
    "HttpServer",
    "MCPEnv",
    "MCPEnvironment",
    "Scorer",
    "ServerToolError",
    "StdioServer",
]
