"""User turns over the wire: a real server hosting the scripted-user environment answers
the same conversation over HTTP (the step fast path and the FastAPI route) and WebSocket
as in-process, with the user messages and the changed tools in the step results."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from envhub.clients.remote import RemoteEnvironment
from envhub.server import create_app
from envhub.testing import serve_in_thread
from envhub.types import StepResult
from tests.core.user_turn_envs import CONVERSATION, ENV_ID, check_played, play


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serve_in_thread(create_app([ENV_ID])) as base_url:
        yield base_url


@pytest.mark.parametrize(
    "client", [{"transport": "ws"}, {"transport": "http"}, {"http": "httpx"}], ids=str
)
async def test_a_conversation_with_user_turns_over_remote_sessions(
    url: str, client: dict[str, Any]
) -> None:
    async with RemoteEnvironment(url, "scripted-user", **client) as remote:
        assert sorted(remote_tool["function"]["name"]
                      for remote_tool in (await remote.info()).tools) == ["add", "answer"]
        async with remote.open("chat-0") as session:
            results = await play(session)
            assert sorted(t["function"]["name"] for t in session.tools) == [
                "add", "answer", "multiply"
            ]
        closed = await session.close()
    check_played(results)
    assert closed.reward == 1.0 and closed.metrics.turns == len(CONVERSATION)


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast_path", "route"])
async def test_raw_http_steps_carry_the_user_turn(url: str, fast_path: bool) -> None:
    """The fast path answers JSON bodies with a declared length; a chunked body goes to
    the FastAPI route: both serialise the new fields."""
    async with httpx.AsyncClient(base_url=url) as http:
        created = await http.post("/v1/sessions", json={"env": "scripted-user"})
        session_id = created.json()["session_id"]
        results = []
        for calls, content in CONVERSATION:
            body = {"tool_calls": calls, "content": content}
            if fast_path:
                response = await http.post(f"/v1/sessions/{session_id}/step", json=body)
            else:
                response = await http.post(
                    f"/v1/sessions/{session_id}/step",
                    content=_chunked(httpx.Request("POST", url, json=body).read()),
                    headers={"content-type": "application/json"},
                )
            assert response.status_code == 200, response.text
            results.append(StepResult.model_validate(response.json()))
        await http.post(f"/v1/sessions/{session_id}/close")
    check_played(results)


async def _chunked(payload: bytes) -> Any:
    yield payload
