"""Every bad request gets a 4xx with an ``{"error": {code, message}}`` body, never a 500."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx
import pytest


@pytest.fixture
async def http(url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=url) as client:
        yield client


def assert_error(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == code
    assert error["message"]
    return error["message"]


async def create(http: httpx.AsyncClient, **body: object) -> dict:
    response = await http.post("/v1/sessions", json={"env": "probe", **body})
    assert response.status_code == 200, response.text
    return response.json()


async def test_unknown_environment(http: httpx.AsyncClient) -> None:
    message = assert_error(await http.post("/v1/sessions", json={"env": "nope"}), 404,
                           "unknown_environment")
    assert "calc" in message and "probe" in message  # names what is hosted
    assert_error(await http.get("/v1/environments/nope/tasks"), 404, "unknown_environment")
    assert_error(await http.get("/v1/environments/nope"), 404, "unknown_environment")


async def test_unknown_task(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/sessions", json={"env": "calc", "task_id": "calc-9-99999"})
    assert_error(response, 404, "unknown_task")


async def test_unknown_session(http: httpx.AsyncClient) -> None:
    step = {"tool_calls": []}
    assert_error(await http.post("/v1/sessions/missing/step", json=step), 404, "session_not_found")
    assert_error(await http.post("/v1/sessions/missing/close"), 404, "session_not_found")
    assert_error(await http.get("/v1/sessions/missing"), 404, "session_not_found")


async def test_unknown_route_and_method(http: httpx.AsyncClient) -> None:
    assert_error(await http.get("/v2/nothing"), 404, "not_found")
    assert_error(await http.delete("/v1/sessions"), 405, "method_not_allowed")


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b'{"env": "probe",',
        b"[]",
        b'"a string"',
        b'{"env": 42}',
        b'{"env": "probe", "seed": "abc"}',
        b'{"env": "probe", "options": ["x"]}',
        b'{"env": "probe", "unexpected": 1}',
        b'{"env": "probe", "session_id": "has/slash"}',
        b"{}",
    ],
)
async def test_malformed_create(http: httpx.AsyncClient, body: bytes) -> None:
    response = await http.post(
        "/v1/sessions", content=body, headers={"content-type": "application/json"}
    )
    assert_error(response, 422, "invalid_request")


@pytest.mark.parametrize(
    "body",
    [
        b"{",
        b'{"tool_calls": "calculate"}',
        b'{"tool_calls": [{"arguments": "{}"}]}',
        b'{"tool_calls": [], "content": 5}',
        b'{"tool_calls": [], "request_id": ["x"]}',
    ],
)
async def test_malformed_step(http: httpx.AsyncClient, body: bytes) -> None:
    sid = (await create(http))["session_id"]
    response = await http.post(
        f"/v1/sessions/{sid}/step", content=body, headers={"content-type": "application/json"}
    )
    assert_error(response, 422, "invalid_request")
    # the session is untouched and keeps working
    ok = await http.post(f"/v1/sessions/{sid}/step", json={
        "tool_calls": [{"id": "1", "name": "echo", "arguments": '{"text": "hi"}'}]})
    assert ok.json()["observations"][0]["content"] == "hi"


async def test_json_body_without_json_content_type_names_the_fix(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/sessions", content=b'{"env": "probe"}',
                               headers={"content-type": "application/x-www-form-urlencoded"})
    assert "Content-Type: application/json" in assert_error(response, 422, "invalid_request")


async def test_bad_query_and_split(http: httpx.AsyncClient) -> None:
    assert_error(await http.get("/v1/environments/calc/tasks", params={"limit": "many"}), 422,
                 "invalid_request")
    assert_error(await http.get("/v1/environments/calc/tasks", params={"offset": -1}), 422,
                 "invalid_request")
    message = assert_error(await http.get("/v1/environments/calc/tasks",
                                          params={"split": "nope"}), 400, "invalid_request")
    assert "train" in message


async def test_bad_options(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/sessions", json={"env": "calc", "options": {"colour": "red"}})
    assert "colour" in assert_error(response, 400, "invalid_request")
    response = await http.post("/v1/sessions", json={"env": "calc", "options": {"num_tasks": "x"}})
    assert_error(response, 400, "invalid_request")


async def test_oversize_body(start_server: Callable[..., str]) -> None:
    url = start_server(max_body_bytes=1000)
    async with httpx.AsyncClient(base_url=url) as http:
        sid = (await create(http))["session_id"]
        big = {"tool_calls": [{"id": "1", "name": "echo", "arguments": {"text": "x" * 2000}}]}
        assert_error(await http.post(f"/v1/sessions/{sid}/step", json=big), 413,
                     "payload_too_large")

        async def chunks() -> AsyncIterator[bytes]:  # chunked: no Content-Length to check
            yield b'{"tool_calls": [], "content": "'
            for _ in range(20):
                yield b"y" * 100
            yield b'"}'

        response = await http.post(f"/v1/sessions/{sid}/step", content=chunks(),
                                   headers={"content-type": "application/json"})
        assert "content-length" not in response.request.headers
        assert_error(response, 413, "payload_too_large")
        small = {"tool_calls": [{"id": "1", "name": "echo", "arguments": {"text": "fits"}}]}
        response = await http.post(f"/v1/sessions/{sid}/step", json=small)
        assert response.json()["observations"][0]["content"] == "fits"


async def test_capacity(start_server: Callable[..., str]) -> None:
    url = start_server(max_sessions=2)
    async with httpx.AsyncClient(base_url=url) as http:
        first = await create(http)
        await create(http)
        response = await http.post("/v1/sessions", json={"env": "probe"})
        assert_error(response, 429, "capacity")
        assert response.headers["retry-after"]
        # an idempotent re-create of an existing session is not a new session
        again = await http.post("/v1/sessions", json={"env": "probe",
                                                      "session_id": first["session_id"]})
        assert again.status_code == 200
        await http.post(f"/v1/sessions/{first['session_id']}/close")
        await create(http)  # closing freed a slot


async def test_bearer_token(start_server: Callable[..., str]) -> None:
    url = start_server(token="s3cret")
    async with httpx.AsyncClient(base_url=url) as http:
        assert (await http.get("/health")).status_code == 200  # liveness stays open
        assert_error(await http.get("/v1/environments"), 401, "unauthorized")
        response = await http.post("/v1/sessions", json={"env": "probe"},
                                   headers={"authorization": "Bearer wrong"})
        assert_error(response, 401, "unauthorized")
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert_error(await http.get("/metrics", headers={"authorization": "s3cret"}), 401,
                     "unauthorized")
        ok = await http.get("/v1/environments", headers={"authorization": "Bearer s3cret"})
        assert ok.status_code == 200


async def test_step_after_close_or_end_is_409(http: httpx.AsyncClient) -> None:
    sid = (await create(http))["session_id"]
    await http.post(f"/v1/sessions/{sid}/close")
    step = {"tool_calls": [{"id": "1", "name": "echo", "arguments": '{"text": "x"}'}]}
    assert_error(await http.post(f"/v1/sessions/{sid}/step", json=step), 409, "session_closed")

    sid = (await create(http))["session_id"]
    finish = {"tool_calls": [{"id": "1", "name": "finish", "arguments": '{"value": "ok"}'}]}
    done = (await http.post(f"/v1/sessions/{sid}/step", json=finish)).json()
    assert done["done"] and done["stop_reason"] == "terminal_tool" and done["reward"] == 1.0
    assert_error(await http.post(f"/v1/sessions/{sid}/step", json=step), 409, "session_closed")


async def test_session_id_reused_for_another_env(http: httpx.AsyncClient) -> None:
    await create(http, session_id="shared-id")
    response = await http.post("/v1/sessions", json={"env": "calc", "session_id": "shared-id"})
    assert_error(response, 400, "invalid_request")
