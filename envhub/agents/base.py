"""The hook an agent framework plugs into: :class:`AgentRunner` runs one :class:`AgentEpisode`.

envhub owns everything around the agent (the session, its MCP endpoint, the capture proxy,
scoring, the trajectory); a runner only starts the framework's agent with the task's
messages, the episode's MCP URL and the proxy's base URL, and waits for it to finish.

Contract of :meth:`AgentRunner.run`: return when the agent finished or stopped on its own
(a final answer, its turn cap, a model reply it could not use: all of these are the
model's outcome and get scored); raise when the agent could not run (the framework
crashed, the MCP endpoint was unreachable): the episode is then retried and, if it keeps
failing, masked. Model-server failures need no handling: the proxy records them and the
episode is masked whatever the agent does with the error it gets.

This module is the contract only; building a runner from an ``--agent`` value is
:mod:`envhub.agents.factory`'s, which knows the implementations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from envhub.errors import EnvhubError
from envhub.types import Message

__all__ = ["AgentCrashed", "AgentEpisode", "AgentRunner"]


@dataclass(frozen=True, slots=True)
class AgentEpisode:
    """What an agent gets for one episode.

    ``messages``: the task's opening chat messages (system and user), as the environment
    gave them. ``mcp_url``: the Streamable-HTTP MCP endpoint of this episode's session (its
    tools are the environment's; a call is a step); ``mcp_token``: the bearer token it
    answers (:attr:`mcp_headers`), made for this episode and given to this agent only.
    ``base_url`` and ``api_key``: the capture proxy's OpenAI base URL (ends in ``/v1``)
    and its per-episode key; every model call must go there. ``max_turns``: the run's cap
    on model calls, for the framework's own cap (``None``: the framework's default).
    """

    task_id: str
    messages: list[Message]
    mcp_url: str
    mcp_token: str
    base_url: str
    api_key: str
    model: str
    max_turns: int | None = None

    @property
    def mcp_headers(self) -> dict[str, str]:
        """The HTTP headers every request to :attr:`mcp_url` must carry."""
        return {"Authorization": f"Bearer {self.mcp_token}"}


@runtime_checkable
class AgentRunner(Protocol):
    """Runs one episode of an external agent framework (see the module docstring)."""

    name: str

    async def run(self, episode: AgentEpisode) -> None: ...


class AgentCrashed(EnvhubError):
    """The agent could not run the episode (its framework raised, or it never called the
    model through the proxy): an infrastructure failure, retried then masked."""

    code = "agent_error"
