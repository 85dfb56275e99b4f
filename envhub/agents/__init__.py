"""External agent frameworks run envhub episodes (``envhub rollout ENV --agent NAME``).

Per episode envhub opens the session, serves it over MCP, and starts a capture proxy in
front of the policy's endpoints; the framework's agent gets the task's messages, the MCP
URL with its per-episode token and the proxy's base URL, and runs; envhub scores the
session and writes a normal trajectory whose turns are the agent's model calls with the
server's token ids, and which records every tool call the session ran.

- :class:`AgentRunner` / :class:`AgentEpisode`: the hook a framework implements
  (:mod:`envhub.agents.base`); :func:`make_agent` builds one from an ``--agent`` value
  (:mod:`envhub.agents.factory`).
- :class:`OpenAIAgentsRunner`: the OpenAI Agents SDK (``pip install 'envhub-rl[agents]'``).
- :class:`CommandAgentRunner`: a child process per episode (any framework, own venv).
- :class:`CaptureProxy`: the per-episode OpenAI-compatible recorder.
- :class:`AgentLoop`: the rollout's turn loop for an agent (a
  :class:`~envhub.rollout.TurnLoop`); :class:`AgentEpisodeRunner`: an
  :class:`~envhub.rollout.EpisodeRunner` with it.

``envhub.rollout.run(env, policy, turn_loop=AgentLoop(make_agent("openai-agents")), ...)``
is the ``--agent`` run as a Python call.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from envhub.agents.base import AgentCrashed as AgentCrashed
from envhub.agents.base import AgentEpisode as AgentEpisode
from envhub.agents.base import AgentRunner as AgentRunner
from envhub.agents.command import CommandAgentRunner as CommandAgentRunner
from envhub.agents.factory import AGENTS as AGENTS
from envhub.agents.factory import make_agent as make_agent

__all__ = [
    "AGENTS",
    "AgentCrashed",
    "AgentEpisode",
    "AgentEpisodeRunner",
    "AgentLoop",
    "AgentRunner",
    "CaptureProxy",
    "CapturedCall",
    "CommandAgentRunner",
    "OpenAIAgentsRunner",
    "make_agent",
]

_LAZY = {
    "AgentEpisodeRunner": "envhub.agents.agent_loop",
    "AgentLoop": "envhub.agents.agent_loop",
    "CaptureProxy": "envhub.agents.proxy",
    "CapturedCall": "envhub.agents.proxy",
    "OpenAIAgentsRunner": "envhub.agents.openai_agents",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'envhub.agents' has no attribute {name!r}")
