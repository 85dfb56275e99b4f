"""Building an agent runner from an ``--agent`` value: a name in the ``envhub.agents``
entry-point group (:data:`AGENTS`), ``module:Class``, or ``command:ARGV`` (a child
process per episode, :mod:`envhub.agents.command`).

The contract (:mod:`envhub.agents.base`) knows none of the implementations; this module
knows them all, so that no implementation imports the module that builds it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from envhub.agents.base import AgentRunner
from envhub.agents.command import CommandAgentRunner
from envhub.errors import InvalidRequest
from envhub.registry import PluginKind, load_plugin

__all__ = ["AGENTS", "COMMAND_PREFIX", "make_agent"]

COMMAND_PREFIX = "command:"

AGENTS: PluginKind[Callable[[], AgentRunner]] = PluginKind(
    "envhub.agents", "agent", hint="or command:ARGV (a child process per episode)"
)
"""The ``envhub.agents`` entry-point group: runner classes (built with no arguments) by
``--agent`` name; ``openai-agents`` is envhub's own. ``command:ARGV`` runs a child
process per episode (:mod:`envhub.agents.command`)."""


def make_agent(kind: str, *, pass_env: Sequence[str] = ()) -> AgentRunner:
    """The runner for an ``--agent`` value: a name in :data:`AGENTS`, ``module:Class`` (built
    with no arguments) or ``command:ARGV`` (a shell-quoted command line), whose child also
    gets the variables of envhub's environment that ``pass_env`` names (``--agent-env``)."""
    if kind.startswith(COMMAND_PREFIX):
        return CommandAgentRunner(kind[len(COMMAND_PREFIX) :], pass_env=pass_env)
    if pass_env:
        raise InvalidRequest(
            f"--agent-env passes variables to a command: agent's child; agent {kind!r} "
            "runs in envhub's own process"
        )
    runner = load_plugin(AGENTS, kind)()
    if not isinstance(runner, AgentRunner):
        raise InvalidRequest(f"agent {kind!r} does not implement envhub.agents.AgentRunner")
    return runner
