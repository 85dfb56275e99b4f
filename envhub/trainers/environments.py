"""Opening the environment an adapter is given: a plugin name, a server URL, or an object.

Every adapter (TRL, SkyRL, verl) accepts the same three forms and drives the result
through the one session interface shared by ``LocalEnvironment`` and
``RemoteEnvironment`` (``open``, ``step``, ``close``, ``abort``).
"""

from __future__ import annotations

import inspect
from typing import Any

from envhub.cleanup import abort_quietly as abort_quietly
from envhub.errors import InvalidRequest
from envhub.local import LocalEnvironment, make
from envhub.sync import run_sync
from envhub.types import Message

__all__ = ["abort_quietly", "resolve_environment", "start_messages", "tool_schemas"]


def resolve_environment(
    env: Any,
    *,
    env_name: str | None = None,
    options: dict[str, Any] | None = None,
    token: str | None = None,
    **make_kwargs: Any,
) -> Any:
    """A session factory from a plugin name, a server URL (with ``env_name``), or an
    already built ``LocalEnvironment`` / ``RemoteEnvironment``."""
    if isinstance(env, str) and env.startswith(("http://", "https://")):
        if not env_name:
            raise InvalidRequest(f"a server URL ({env}) needs env_name= (which hosted environment)")
        if make_kwargs:
            raise InvalidRequest(
                f"{', '.join(sorted(make_kwargs))}: a hosted environment's budgets are set by "
                "its server (envhub serve --max-turns ...)"
            )
        from envhub.client import RemoteEnvironment

        return RemoteEnvironment(env, env_name, options=options, token=token)
    if isinstance(env, str) or inspect.isclass(env):
        return make(env, **make_kwargs, **(options or {}))
    if not hasattr(env, "open"):
        raise InvalidRequest(f"not an environment, name or URL: {env!r}")
    return env


def tool_schemas(env: Any) -> list[dict[str, Any]]:
    """The environment's OpenAI tool schemas (a remote one is asked over HTTP)."""
    if isinstance(env, LocalEnvironment):
        return env.tools
    return list(run_sync(env.info())["tools"])


async def start_messages(session: Any) -> list[Message]:
    """The first messages of a session (remote sessions hold them, local ones return them
    from their idempotent ``reset``)."""
    messages = getattr(session, "messages", None)
    if messages is not None:
        return list(messages)
    return list((await session.reset()).messages)
