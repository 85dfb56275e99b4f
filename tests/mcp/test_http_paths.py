"""Where ``envhub serve --mcp`` answers MCP: ``/mcp/{env}``, ``/{env}/mcp`` and, when one
environment is hosted, ``/mcp`` (MCP Inspector 0.15 rewrites any URL whose path does not
end in ``/mcp``). The official SDK client calls a tool through each path of a real
server; the HTTP API keeps its routes whatever the hosted environments are named."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

import envhub
from envhub.testing import serve_in_subprocess, serve_in_thread
from tests.mcp.clients import ACCEPT, INITIALIZE, http_session, text_of


async def test_one_hosted_environment_answers_at_every_mcp_path() -> None:
    with serve_in_subprocess("calc", "--mcp") as url:
        for path in ("/mcp/calc", "/calc/mcp", "/mcp", "/calc/mcp/", "/mcp/"):
            async with http_session(f"{url}{path}?task_id=calc-0-00000") as session:
                result = await session.call_tool("calculate", {"expression": "805 - 273"})
                assert text_of(result) == "532", path


@pytest.fixture(scope="module")
def named_like_the_api(mcp_app: Callable[..., Any]) -> object:
    """calc hosted as ``v1`` and as ``health`` (the API's first path segments), and sql."""
    app = mcp_app(
        {"v1": envhub.make("calc"), "health": envhub.make("calc"), "sql": envhub.make("sql")})
    with serve_in_thread(app) as url:
        yield url


async def test_environments_named_like_api_paths_leave_the_api_its_routes(
    named_like_the_api: str,
) -> None:
    url = named_like_the_api
    async with httpx.AsyncClient(base_url=url) as http:
        health = await http.get("/health")
        assert health.status_code == 200 and health.json()["max_sessions"] > 0
        assert (await http.get("/v1/environments/v1")).status_code == 200
        assert (await http.get("/v1/environments/health/tasks")).status_code == 200
        paths = (await http.get("/openapi.json")).json()["paths"]
        # the MCP door claims /{env}/mcp for hosted names only, so no API route may end so
        assert paths and not [p for p in paths if p.rstrip("/").endswith("/mcp")]
        unknown = await http.post("/nosuch/mcp", json=INITIALIZE, headers=ACCEPT)
        assert unknown.status_code == 404 and "jsonrpc" not in unknown.text  # the API's 404
    for path in ("/v1/mcp", "/mcp/v1", "/health/mcp", "/mcp/health"):
        async with http_session(f"{url}{path}?task_id=calc-0-00000") as session:
            assert text_of(await session.call_tool("calculate", {"expression": "2 * 21"})) == "42"
    async with http_session(f"{url}/sql/mcp?task_id=chinook-0000") as session:
        assert "album (347 rows)" in text_of(await session.call_tool("list_tables", {}))


async def test_bare_mcp_with_several_environments_names_the_paths_to_use(
    named_like_the_api: str,
) -> None:
    async with httpx.AsyncClient(base_url=named_like_the_api) as http:
        answer = await http.post("/mcp", json=INITIALIZE, headers=ACCEPT)
    assert answer.status_code == 404 and answer.json()["id"] == INITIALIZE["id"]
    error = answer.json()["error"]
    assert error["message"] == (
        "3 environments are hosted here: name one, /mcp/ENV or /ENV/mcp "
        "(hosted: health, sql, v1)"
    )
    assert error["data"] == {"code": "unknown_environment"}
