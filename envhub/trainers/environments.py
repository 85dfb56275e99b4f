"""Opening the environment an adapter is given: a plugin name, a server URL, or a client.

Every adapter (TRL, SkyRL, verl) accepts the same three forms and drives the result
through the :class:`~envhub.protocol.EnvironmentClient` and
:class:`~envhub.protocol.SessionHandle` protocols only (``open``, ``step``, ``close``,
``abort``), so any transport works.
"""

from __future__ import annotations

import inspect
from typing import Any

from envhub.clients.local import make
from envhub.environment import Environment
from envhub.errors import InvalidRequest
from envhub.protocol import EnvironmentClient, SessionHandle
from envhub.runtime.cleanup import abort_quietly as abort_quietly
from envhub.runtime.sync import run_sync
from envhub.types import Message

__all__ = ["abort_quietly", "resolve_environment", "start_messages", "tool_schemas"]


def resolve_environment(
    env: Any,
    *,
    env_name: str | None = None,
    options: dict[str, Any] | None = None,
    token: str | None = None,
    **make_kwargs: Any,
) -> EnvironmentClient:
    """An environment client from a plugin name (or environment class: in-process), a
    server URL (with ``env_name``), or an already built :class:`EnvironmentClient`."""
    if isinstance(env, str) and env.startswith(("http://", "https://")):
        if not env_name:
            raise InvalidRequest(f"a server URL ({env}) needs env_name= (which hosted environment)")
        if make_kwargs:
            raise InvalidRequest(
                f"{', '.join(sorted(make_kwargs))}: a hosted environment's budgets are set by "
                "its server (envhub serve --max-turns ...)"
            )
        from envhub.clients.remote import RemoteEnvironment

        return RemoteEnvironment(env, env_name, options=options, token=token)
    if isinstance(env, str) or (inspect.isclass(env) and issubclass(env, Environment)):
        return make(env, **make_kwargs, **(options or {}))
    if not isinstance(env, EnvironmentClient):
        raise InvalidRequest(f"not an environment, name or URL: {env!r}")
    return env


def tool_schemas(env: EnvironmentClient) -> list[dict[str, Any]]:
    """The environment's OpenAI tool schemas (from its ``info()``; blocking)."""
    return list(run_sync(env.info()).tools)


async def start_messages(session: SessionHandle) -> list[Message]:
    """The first messages of a session (``reset`` is idempotent: it returns the start)."""
    return list((await session.reset()).messages)
