"""``--agent 'command:ARGV'``: each episode's agent is a child process.

Any framework in any Python environment (or any program) can play envhub episodes this
way, without importing envhub: one whose dependencies clash with envhub's (smolagents'
MCP adapter needs the 1.x ``mcp`` SDK, envhub the 2.x one) runs from its own virtual
environment. The child gets its episode through its environment and stdin:

- ``ENVHUB_MCP_URL``, ``ENVHUB_MCP_TOKEN``: the episode's Streamable-HTTP MCP endpoint
  (its tools) and the bearer token it requires (``Authorization: Bearer <token>``);
- ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``: the capture proxy and its per-episode key;
  ``ENVHUB_MODEL``: the model name;
- ``ENVHUB_MAX_TURNS`` (when the run caps turns), ``ENVHUB_TASK_ID``;
- stdin: the task's opening messages as a JSON list of chat messages.

The child's environment is built, not inherited: besides the variables above it holds
only :data:`INHERITED` from envhub's own environment (what any program needs to run), the
names the operator lists in ``pass_env`` (``--agent-env NAME``) and the values given in
``env``. envhub's process holds secrets the agent must not see (``ENVHUB_TOKEN``, the
operator's ``OPENAI_API_KEY``, cloud credentials), and the agent is driven by the model.

Exit status 0 means the agent finished (whatever it achieved: the session scores it); any
other status, or running past ``timeout_s``, is a crash: the episode is retried and then
masked, with the end of the child's stderr in the error. A cancelled episode (the run's
time limit) kills the child.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
from collections.abc import Iterable, Mapping, Sequence

from envhub.agents.base import AgentEpisode
from envhub.errors import InvalidRequest

__all__ = ["CommandAgentRunner"]

STDERR_TAIL = 2000
"""Characters of a failed child's stderr kept in the masked trajectory's error."""

INHERITED = ("PATH", "HOME", "LANG", "TMPDIR", "TERM")
"""Variables of envhub's environment every child gets (with ``LC_*``, the locale)."""


class AgentProcessFailed(RuntimeError):
    """The child exited non-zero or ran past its time limit."""


class CommandAgentRunner:
    """Runs ``argv`` once per episode (see the module docstring): ``pass_env`` names more
    variables of envhub's environment to pass on, ``env`` gives variables their values,
    ``timeout_s`` bounds one episode's child."""

    name = "command"

    def __init__(
        self,
        argv: Sequence[str] | str,
        *,
        env: Mapping[str, str] | None = None,
        pass_env: Iterable[str] = (),
        timeout_s: float | None = None,
    ) -> None:
        self.argv = shlex.split(argv) if isinstance(argv, str) else list(argv)
        if not self.argv:
            raise InvalidRequest("the agent command is empty")
        self.env = dict(env or {})
        self.pass_env = tuple(pass_env)
        self.timeout_s = timeout_s

    def child_environment(self, episode: AgentEpisode) -> dict[str, str]:
        """The child's whole environment (see the module docstring)."""
        passed = {*INHERITED, *self.pass_env}
        variables = {
            name: value
            for name, value in os.environ.items()
            if name in passed or name.startswith("LC_")
        }
        variables.update(self.env)
        variables.update(
            ENVHUB_MCP_URL=episode.mcp_url,
            ENVHUB_MCP_TOKEN=episode.mcp_token,
            OPENAI_BASE_URL=episode.base_url,
            OPENAI_API_KEY=episode.api_key,
            ENVHUB_MODEL=episode.model,
            ENVHUB_TASK_ID=episode.task_id,
        )
        if episode.max_turns is not None:
            variables["ENVHUB_MAX_TURNS"] = str(episode.max_turns)
        return variables

    async def run(self, episode: AgentEpisode) -> None:
        child = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=self.child_environment(episode),
        )
        task = json.dumps(episode.messages).encode()
        try:
            _, stderr = await asyncio.wait_for(child.communicate(task), self.timeout_s)
        except asyncio.TimeoutError:
            raise AgentProcessFailed(
                f"{self.argv[0]} ran past its {self.timeout_s}s limit and was killed"
            ) from None
        finally:
            if child.returncode is None:  # timed out or cancelled: nothing may outlive it
                with contextlib.suppress(ProcessLookupError):
                    child.kill()
                await child.wait()
        if child.returncode != 0:
            tail = stderr.decode(errors="replace")[-STDERR_TAIL:].strip()
            raise AgentProcessFailed(f"{self.argv[0]} exited with {child.returncode}: {tail}")
