"""Opening the environment an adapter is given: anything :func:`envhub.connect` takes.

Every adapter (TRL, SkyRL, verl) accepts the same forms (a plugin name or class, a server
URL, several URLs, a Ray fleet, or a client) and drives the result through the
:class:`~envhub.protocol.EnvironmentClient` and :class:`~envhub.protocol.SessionHandle`
protocols only (``open``, ``step``, ``close``, ``abort``), so any transport works.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from envhub.clients.connect import connect, make_keywords
from envhub.environment import Environment
from envhub.protocol import EnvironmentClient, SessionHandle
from envhub.runtime.cleanup import abort_quietly as abort_quietly
from envhub.runtime.sync import run_sync
from envhub.types import Message

__all__ = ["abort_quietly", "resolve_environment", "start_messages", "tool_schemas"]


def resolve_environment(
    env: str | Sequence[str] | type[Environment] | EnvironmentClient,
    *,
    env_name: str | None = None,
    options: dict[str, Any] | None = None,
    token: str | None = None,
    **make_kwargs: Any,
) -> EnvironmentClient:
    """:func:`envhub.connect` for the adapters' signatures: ``env_name`` names the hosted
    environment of a server, pool or fleet; ``make_kwargs`` are :func:`envhub.make`'s
    (budget fields such as ``max_turns``, and more environment options), in-process
    only."""
    extra, budgets = make_keywords(make_kwargs)
    return connect(env, env_name, options={**(options or {}), **extra} if extra else options,
                   budgets=budgets, token=token)  # fmt: skip


def tool_schemas(env: EnvironmentClient) -> list[dict[str, Any]]:
    """The environment's OpenAI tool schemas (from its ``info()``; blocking)."""
    return list(run_sync(env.info()).tools)


async def start_messages(session: SessionHandle) -> list[Message]:
    """The first messages of a session (``reset`` is idempotent: it returns the start)."""
    return list((await session.reset()).messages)
