"""The server's MCP door opens its sessions through ``StoreEnvironment``, an
``EnvironmentClient`` over the session store: it passes the public conformance suite."""

from __future__ import annotations

import envhub
from envhub.server.mcp import StoreEnvironment
from envhub.server.metrics import ServerMetrics
from envhub.server.store import SessionStore
from envhub.testing import check_client_conformance


async def test_the_store_client_conforms() -> None:
    store = SessionStore({"calc": envhub.make("calc")}, max_sessions=64, session_ttl_s=60.0,
                         metrics=ServerMetrics())
    try:
        await check_client_conformance(StoreEnvironment(store, "calc"))
    finally:
        await store.shutdown()
