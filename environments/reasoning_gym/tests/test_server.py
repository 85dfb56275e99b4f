"""Over HTTP: a client picks datasets, size, seed and curriculum difficulty; operator
options and out-of-bounds values are 400 ``invalid_request``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from reasoning_gym.factory import create_dataset

import envhub
from envhub.server import create_app
from envhub.testing import serve_in_thread


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    env = envhub.make("reasoning_gym", datasets="gcd", size=1)
    with serve_in_thread(create_app({"reasoning_gym": env})) as base_url:
        yield base_url


@pytest.fixture
async def http(url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        yield client


async def test_a_client_chooses_the_tasks(http: httpx.AsyncClient) -> None:
    options = {
        "datasets": "chain_sum",
        "size": 3,
        "seed": 5,
        "config": {"chain_sum": {"min_terms": 4, "max_terms": 4}},
    }
    created = await http.post(
        "/v1/sessions",
        json={"env": "reasoning_gym", "task_id": "chain_sum-5-0002", "options": options},
    )
    assert created.status_code == 200, created.text
    session = created.json()
    entry = create_dataset("chain_sum", seed=5, size=3, min_terms=4, max_terms=4)[2]
    assert session["messages"][1]["content"] == entry["question"]
    call = {"id": "1", "name": "answer", "arguments": {"answer": entry["answer"]}}
    step = await http.post(
        f"/v1/sessions/{session['session_id']}/step", json={"tool_calls": [call]}
    )
    assert step.json()["done"] and step.json()["reward"] == 1.0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"python": True}, "set by the server's operator"),
        ({"sandbox": "local"}, "set by the server's operator"),
        ({"size": 501}, "less than or equal to 500"),
        ({"config": {"chain_sum": {"max_terms": 1000}}}, "outside the curriculum's levels"),
        ({"datasets": "no_such_dataset"}, "unknown Reasoning Gym dataset"),
        ({"datasets": "gcd", "config": {"gcd": {"seed": 1}}}, "not settable by clients"),
    ],
)
async def test_out_of_bounds_options_are_refused(
    http: httpx.AsyncClient, options: dict[str, Any], message: str
) -> None:
    response = await http.post("/v1/sessions", json={"env": "reasoning_gym", "options": options})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and message in error["message"]
