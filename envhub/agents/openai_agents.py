"""``--agent openai-agents``: the OpenAI Agents SDK (``pip install 'envhub-rl[agents]'``).

One ``Agent`` per episode whose model is an ``OpenAIChatCompletionsModel`` on its own
``AsyncOpenAI`` client pointed at the capture proxy, and whose only tools are the
episode's MCP endpoint (``MCPServerStreamableHttp``). The SDK's tracing is disabled for
the run (it would export to OpenAI's servers), and the client does not retry: the policy
behind the proxy already retries transient model-server errors, and after a failure the
episode is over. Both HTTP clients share one TLS context: building one loads the CA
store (about 50 CPU-ms), which per episode and client was half the path's CPU time.

Outcomes the SDK reports as exceptions but that are the model's doing (it ran into the
turn cap, or sent a reply the SDK could not use) end the episode normally, to be scored;
anything else the SDK raises propagates as a crash (:mod:`envhub.agents.base`).
"""

from __future__ import annotations

import functools
import ssl
from typing import Any, cast

from envhub.agents.base import AgentEpisode
from envhub.types import Message

__all__ = ["OpenAIAgentsRunner"]


class OpenAIAgentsRunner:
    """Runs each episode as ``Runner.run(agent, task messages)`` of the OpenAI Agents SDK.

    ``instructions``: the agent's system prompt (default: none; the task's own messages,
    system message included, are the input). ``tool_timeout_s``: how long one MCP call may
    take before the SDK gives up on it (the environment's own tool timeout normally
    answers first). ``request_timeout_s``: one model call through the proxy.
    """

    name = "openai-agents"

    def __init__(
        self,
        *,
        instructions: str | None = None,
        tool_timeout_s: float = 600.0,
        request_timeout_s: float = 900.0,
    ) -> None:
        self.instructions = instructions
        self.tool_timeout_s = tool_timeout_s
        self.request_timeout_s = request_timeout_s

    async def run(self, episode: AgentEpisode) -> None:
        from agents import (
            Agent,
            MaxTurnsExceeded,
            ModelBehaviorError,
            OpenAIChatCompletionsModel,
            RunConfig,
            Runner,
        )
        from agents.mcp import MCPServerStreamableHttp
        from agents.run import DEFAULT_MAX_TURNS
        from openai import AsyncOpenAI, DefaultAsyncHttpxClient

        client = AsyncOpenAI(
            base_url=episode.base_url,
            api_key=episode.api_key,
            max_retries=0,
            timeout=self.request_timeout_s,
            http_client=DefaultAsyncHttpxClient(verify=_tls_context()),
        )
        try:
            async with MCPServerStreamableHttp(
                {
                    "url": episode.mcp_url,
                    "headers": episode.mcp_headers,
                    "timeout": 30.0,
                    "httpx_client_factory": _mcp_client,
                },
                cache_tools_list=True,
                name="envhub",
                client_session_timeout_seconds=self.tool_timeout_s,
                failure_error_function=_model_mistakes_only,
            ) as tools:
                agent: Agent[None] = Agent(
                    name="envhub-agent",
                    instructions=self.instructions,
                    model=OpenAIChatCompletionsModel(episode.model, client),
                    mcp_servers=[tools],
                )
                config = RunConfig(
                    tracing_disabled=True, tool_not_found_behavior="return_error_to_model"
                )
                try:
                    await Runner.run(
                        agent,
                        _input_items(episode.messages),
                        run_config=config,
                        max_turns=episode.max_turns or DEFAULT_MAX_TURNS,
                    )
                except (MaxTurnsExceeded, ModelBehaviorError):
                    return  # the model's outcome: the session says what it scores
        finally:
            await client.close()


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The TLS context every episode's clients share (see the module docstring)."""
    return ssl.create_default_context()


def _mcp_client(
    headers: dict[str, str] | None = None, timeout: Any = None, auth: Any = None
) -> Any:
    """The MCP SDK's HTTP client as the Agents SDK builds it, on the shared TLS context
    (``httpx2``: the HTTP library of the ``mcp`` 2.x SDK)."""
    import httpx2

    options: dict[str, Any] = {"follow_redirects": False, "verify": _tls_context()}
    if headers is not None:
        options["headers"] = headers
    if timeout is not None:
        options["timeout"] = timeout
    if auth is not None:
        options["auth"] = auth
    return httpx2.AsyncClient(**options)


def _model_mistakes_only(context: Any, error: Exception) -> str:
    """A tool call the SDK could not make because of the model (arguments that are not a
    JSON object) becomes an error the model reads, as envhub's own loop does; any other
    failure (an MCP error: the environment or its transport failed) is raised, so the
    episode is retried and masked instead of scored."""
    from agents import ModelBehaviorError

    if isinstance(error, ModelBehaviorError):
        return f"Error: {error}"
    raise error


def _input_items(messages: list[Message]) -> Any:
    """The task's chat messages as the SDK's input items (``{"role", "content"}``; text
    parts of a multi-part content are joined)."""
    items = []
    for message in messages:
        content = message.get("content") or ""
        if isinstance(content, list):
            content = "".join(
                part.get("text", "") for part in content if isinstance(part, dict)
            )
        items.append({"role": message.get("role", "user"), "content": cast(str, content)})
    return items
