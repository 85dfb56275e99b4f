"""Episodes over real HTTP: tool failures, idempotency, the reaper, metrics, concurrency."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

import envhub
from tests.server import probe_env


@pytest.fixture
async def http(url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        yield client


def call(name: str, arguments: str, call_id: str = "c1") -> dict:
    return {"id": call_id, "name": name, "arguments": arguments}


async def create(http: httpx.AsyncClient, env: str = "probe", **body: object) -> str:
    response = await http.post("/v1/sessions", json={"env": env, **body})
    assert response.status_code == 200, response.text
    return response.json()["session_id"]


async def step(http: httpx.AsyncClient, sid: str, *calls: dict, **extra: object) -> dict:
    response = await http.post(f"/v1/sessions/{sid}/step",
                               json={"tool_calls": list(calls), **extra})
    assert response.status_code == 200, response.text
    return response.json()


async def test_calc_episode_scores_its_gold_answer(http: httpx.AsyncClient) -> None:
    task = envhub.make("calc").tasks.get("calc-0-00000")
    start = (await http.post("/v1/sessions", json={"env": "calc", "task_id": task.id})).json()
    assert start["task_id"] == task.id
    assert start["messages"] == task.prompt
    assert {t["function"]["name"] for t in start["tools"]} == {"calculate", "answer"}
    sid = start["session_id"]
    # OpenAI's nested tool-call form works as well as the flat one
    nested = {"id": "n1", "type": "function",
              "function": {"name": "calculate", "arguments": '{"expression": "6*7"}'}}
    result = await step(http, sid, nested)
    assert result["observations"] == [
        {"tool_call_id": "n1", "name": "calculate", "content": "42", "is_error": False,
         "truncated": False}
    ]
    assert not result["done"]
    for i, gold in enumerate(task.gold_actions):
        result = await step(http, sid, {"id": f"g{i}", "name": gold.name,
                                        "arguments": gold.arguments})
    assert result["done"] and result["stop_reason"] == "terminal_tool"
    assert result["reward"] == 1.0
    closed = (await http.post(f"/v1/sessions/{sid}/close")).json()
    assert closed["reward"] == 1.0
    assert closed["components"]["correct"] == 1.0
    assert closed["metrics"]["tool_calls"] == 1 + len(task.gold_actions)
    info = (await http.get(f"/v1/sessions/{sid}")).json()
    assert info["closed"] and info["env"] == "calc" and info["task_id"] == task.id


async def test_tool_failures_become_observations_and_the_session_goes_on(
    http: httpx.AsyncClient,
) -> None:
    sid = await create(http)
    result = await step(http, sid, call("explode", "{}"))
    assert result["observations"][0]["is_error"]
    assert "RuntimeError: boom" in result["observations"][0]["content"]
    result = await step(http, sid, call("block", '{"seconds": 1.5}'))  # sync, 0.5 s timeout
    assert result["observations"][0]["is_error"]
    assert "timed out" in result["observations"][0]["content"]
    result = await step(http, sid, call("nap", '{"seconds": 5}'))  # async, 0.5 s timeout
    assert "timed out" in result["observations"][0]["content"]
    result = await step(http, sid, call("echo", "{bad json"), call("nosuch", "{}", "c2"),
                        call("echo", '{"text": [1]}', "c3"))
    assert [o["is_error"] for o in result["observations"]] == [True, True, True]
    result = await step(http, sid, call("echo", '{"text": "still here"}'))
    assert result["observations"][0] == {"tool_call_id": "c1", "name": "echo",
                                         "content": "still here", "is_error": False,
                                         "truncated": False}
    info = (await http.get(f"/v1/sessions/{sid}")).json()
    assert info["metrics"]["tool_errors"] == 6
    assert info["metrics"]["errors_by_kind"] == {
        "exception": 1, "timeout": 2, "invalid_arguments": 2, "unknown_tool": 1}
    assert not info["done"]


async def test_final_answer_without_tool_calls_ends_the_episode(http: httpx.AsyncClient) -> None:
    sid = await create(http)
    result = await step(http, sid, content="I think it is ok")
    assert result["done"] and result["stop_reason"] == "final_answer"
    assert result["observations"] == []


async def test_close_twice_returns_the_same_reward(http: httpx.AsyncClient) -> None:
    sid = await create(http)
    await step(http, sid, call("finish", '{"value": "ok"}'))
    first = await http.post(f"/v1/sessions/{sid}/close")
    second = await http.post(f"/v1/sessions/{sid}/close")
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json()
    assert first.json()["reward"] == 1.0


async def test_create_with_session_id_is_idempotent(start_server: Callable[..., str]) -> None:
    async with httpx.AsyncClient(base_url=start_server()) as http:
        await _check_idempotent_create(http)


async def _check_idempotent_create(http: httpx.AsyncClient) -> None:
    body = {"env": "probe", "session_id": "client-chosen.1", "seed": 3}
    answers = await asyncio.gather(*(http.post("/v1/sessions", json=body) for _ in range(5)))
    starts = [a.json() for a in answers]
    assert all(s == starts[0] for s in starts)
    assert starts[0]["session_id"] == "client-chosen.1"
    again = (await http.post("/v1/sessions", json=body)).json()
    assert again == starts[0]
    metrics = (await http.get("/metrics")).text
    assert 'envhub_sessions_created_total{env="probe"} 1.0' in metrics
    assert 'envhub_sessions_open{env="probe"} 1.0' in metrics


async def test_step_with_request_id_is_idempotent(http: httpx.AsyncClient) -> None:
    sid = await create(http)
    body = {"tool_calls": [call("echo", '{"text": "once"}')], "request_id": "r-1"}
    answers = await asyncio.gather(*(http.post(f"/v1/sessions/{sid}/step", json=body)
                                     for _ in range(4)))
    assert all(a.json() == answers[0].json() for a in answers)
    info = (await http.get(f"/v1/sessions/{sid}")).json()
    assert info["metrics"]["turns"] == 1
    assert info["metrics"]["tool_calls"] == 1
    await step(http, sid, call("echo", '{"text": "twice"}'), request_id="r-2")
    info = (await http.get(f"/v1/sessions/{sid}")).json()
    assert info["metrics"]["turns"] == 2


async def test_options_build_a_variant_of_the_environment(http: httpx.AsyncClient) -> None:
    ok = await http.post("/v1/sessions", json={"env": "probe", "options": {"num_tasks": 7},
                                               "task_id": "probe-6"})
    assert ok.status_code == 200, ok.text
    default = await http.post("/v1/sessions", json={"env": "probe", "task_id": "probe-6"})
    assert default.json()["error"]["code"] == "unknown_task"  # the hosted set has 3 tasks


async def test_listing_and_task_pages(http: httpx.AsyncClient) -> None:
    envs = (await http.get("/v1/environments")).json()["environments"]
    calc = next(e for e in envs if e["name"] == "calc")
    assert calc["tasks"] == 3000 and calc["splits"] == ["test", "train"]
    assert calc["version"] == "0.1.0" and calc["budgets"]["max_turns"] == 8
    page = (await http.get("/v1/environments/calc/tasks",
                           params={"offset": 2, "limit": 3, "split": "train"})).json()
    expected = await envhub.make("calc").task_ids("train")
    assert page["task_ids"] == expected[2:5]
    assert page["total"] == len(expected)
    health = (await http.get("/health")).json()  # liveness and load, for balancers
    assert health["status"] == "ok" and health["version"] == envhub.__version__
    assert health["max_sessions"] >= 1
    before = health["sessions"]  # the server is shared with other tests of the module
    opened = (await http.post("/v1/sessions", json={"env": "calc"})).json()
    assert (await http.get("/health")).json()["sessions"] == before + 1
    await http.post(f"/v1/sessions/{opened['session_id']}/close")
    assert (await http.get("/health")).json()["sessions"] == before


async def test_reaper_aborts_idle_sessions(start_server: Callable[..., str]) -> None:
    url = start_server(session_ttl_s=0.3)
    async with httpx.AsyncClient(base_url=url) as http:
        sid = await create(http, task_id="probe-2")
        closed_before = probe_env.CLOSED.count("probe-2")
        for _ in range(300):  # the reaper runs every ttl/4; give it up to ~30 s on a busy box
            if (await http.get(f"/v1/sessions/{sid}")).status_code == 404:
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail("idle session was never reaped")
        assert probe_env.CLOSED.count("probe-2") == closed_before + 1  # its env.close() ran
        response = await http.post(f"/v1/sessions/{sid}/step", json={"tool_calls": []})
        assert response.json()["error"]["code"] == "session_not_found"
        metrics = (await http.get("/metrics")).text
        assert 'envhub_sessions_reaped_total{env="probe"} 1.0' in metrics
        assert 'envhub_sessions_open{env="probe"} 0.0' in metrics


async def test_blocking_tool_does_not_stall_other_sessions(http: httpx.AsyncClient) -> None:
    probe_env.RELEASE.clear()
    blocked_sid, free_sid = await create(http), await create(http)
    blocked = asyncio.create_task(step(http, blocked_sid, call("wait_for_release", "{}")))
    try:
        for i in range(5):
            result = await step(http, free_sid, call("echo", f'{{"text": "{i}"}}'))
            assert result["observations"][0]["content"] == str(i)
        assert (await http.get("/health")).status_code == 200
        assert not blocked.done()  # still waiting in its worker thread
    finally:
        probe_env.RELEASE.set()
    assert (await blocked)["observations"][0]["content"] == "released"


async def test_metrics(start_server: Callable[..., str]) -> None:
    async with httpx.AsyncClient(base_url=start_server()) as http:
        await _check_metrics(http)


async def _check_metrics(http: httpx.AsyncClient) -> None:
    sid = await create(http)
    await step(http, sid, call("echo", '{"text": "a"}'))
    await step(http, sid, call("explode", "{}"))
    await http.post(f"/v1/sessions/{sid}/close")
    await http.post("/v1/sessions", json={"env": "nope"})
    response = await http.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    for line in [
        'envhub_sessions_open{env="probe"} 0.0',
        'envhub_sessions_closed_total{env="probe"} 1.0',
        'envhub_steps_total{env="probe"} 2.0',
        'envhub_tool_calls_total{env="probe"} 2.0',
        'envhub_step_seconds_count{env="probe"} 2.0',
        'envhub_tool_call_seconds_count{env="probe"} 2.0',
        'envhub_tool_errors_total{env="probe",kind="exception"} 1.0',
        'envhub_http_errors_total{code="unknown_environment"} 1.0',
    ]:
        assert line in text, line


async def test_openapi_lists_every_route(http: httpx.AsyncClient) -> None:
    spec = (await http.get("/openapi.json")).json()
    paths = spec["paths"]
    expected = {
        "/health": "get", "/metrics": "get", "/v1/environments": "get",
        "/v1/environments/{env}/tasks": "get", "/v1/sessions": "post",
        "/v1/sessions/{session_id}/step": "post", "/v1/sessions/{session_id}/close": "post",
        "/v1/sessions/{session_id}": "get",
    }
    for path, method in expected.items():
        assert method in paths[path], path
    schemas = spec["components"]["schemas"]
    for name in ["CreateSession", "StepRequest", "SessionStart", "StepResult", "CloseResult",
                 "SessionInfo", "ErrorBody", "TaskPage", "EnvironmentList"]:
        assert name in schemas, name
    step_op = paths["/v1/sessions/{session_id}/step"]["post"]
    assert step_op["responses"]["409"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/ErrorBody")
