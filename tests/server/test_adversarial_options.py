"""A client is not trusted with the server's machine: it may set only the options an
environment declares client-settable, within their bounds (docs/security.md).

Each case was an accepted request before environments declared their client options:
a client could switch the sandbox off, make the server create directories, probe its
files through error messages, and ask for task sets of any size.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
from typer.testing import CliRunner

from envhub.cli import app
from envhub.server import create_app
from envhub.testing import serve_in_thread
from tests.server.adversarial_envs import MACHINE


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serve_in_thread(create_app(["calc", "sql", MACHINE])) as base_url:
        yield base_url


@pytest.fixture
async def http(url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        yield client


async def refused(http: httpx.AsyncClient, env: str, options: dict[str, Any]) -> str:
    """The ``invalid_request`` message of a create with ``options``."""
    response = await http.post("/v1/sessions", json={"env": env, "options": options})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    return str(error["message"])


@pytest.mark.parametrize("option", [{"sandbox": "local"}, {"timeout_s": 1e9}])
async def test_operator_options_are_refused(http: httpx.AsyncClient, option: dict) -> None:
    message = await refused(http, "machine", {"seed": 1, **option})
    name = next(iter(option))
    assert f"option {name!r} of machine is set by the server's operator" in message
    assert "clients may set: seed" in message


async def test_a_refused_cache_dir_is_never_created(http: httpx.AsyncClient,
                                                    tmp_path: Path) -> None:
    target = tmp_path / "made-by-a-client"
    message = await refused(http, "machine", {"cache_dir": str(target)})
    assert "'cache_dir'" in message and str(target) not in message
    assert not target.exists()


async def test_refusals_do_not_reveal_which_server_files_exist(http: httpx.AsyncClient,
                                                               tmp_path: Path) -> None:
    real = tmp_path / "tasks.jsonl"
    real.write_text(json.dumps({"id": "x", "prompt": []}) + "\n")
    messages = {
        await refused(http, env, {key: str(path)})
        for env, key in (("machine", "tasks"), ("sql", "tasks"), ("sql", "db_root"))
        for path in (real, tmp_path / "missing.jsonl", Path("/etc/passwd"))
    }
    assert len(messages) == 3  # one per option, whatever the path
    assert all("operator" in m and str(tmp_path) not in m for m in messages)


@pytest.mark.parametrize(
    ("env", "options", "named"),
    [
        ("calc", {"num_tasks": 200_000}, "num_tasks"),
        ("calc", {"num_tasks": 0}, "num_tasks"),
        ("calc", {"seed": -1}, "seed"),
        ("sql", {"invalid_reward": 1e9}, "invalid_reward"),
        ("sql", {"comparator": "always_true"}, "comparator"),
        ("sql", {"max_rows": 10_000_000}, "max_rows"),
        ("sql", {"query_timeout_s": 3600}, "query_timeout_s"),
    ],
)
async def test_values_outside_the_declared_bounds_are_refused(
    http: httpx.AsyncClient, env: str, options: dict, named: str
) -> None:
    assert f"option {named!r} of {env}" in await refused(http, env, options)


async def test_unknown_options_are_refused_by_name(http: httpx.AsyncClient) -> None:
    message = await refused(http, "calc", {"colour": "red"})
    assert message == "unknown option 'colour' for calc; clients may set: num_tasks, seed"
    long_name = "x" * 10_000
    assert len(await refused(http, "calc", {long_name: 1})) < 200  # names are quoted cut


async def test_client_settable_options_still_build_variants(http: httpx.AsyncClient) -> None:
    start = await http.post("/v1/sessions", json={
        "env": "calc", "options": {"num_tasks": 12, "seed": "7"}, "task_id": "calc-7-00011"})
    assert start.status_code == 200, start.text
    start = await http.post("/v1/sessions", json={
        "env": "sql", "options": {"comparator": "strict", "invalid_reward": -1}})
    assert start.status_code == 200, start.text


async def test_client_settable_options_are_published(http: httpx.AsyncClient) -> None:
    listed = {e["name"]: e for e in (await http.get("/v1/environments")).json()["environments"]}
    assert listed["calc"]["client_options"] == {
        "num_tasks": {"type": "integer", "minimum": 1, "maximum": 10_000},
        "seed": {"type": "integer", "minimum": 0, "exclusiveMaximum": 2**32},
    }
    assert set(listed["sql"]["client_options"]) == {"comparator", "invalid_reward"}
    assert set(listed["sql"]["client_options"]["comparator"]["enum"]) >= {"bird", "spider"}
    assert listed["machine"]["client_options"] == {
        "seed": {"type": "integer", "minimum": 0, "maximum": 1_000}
    }
    info = CliRunner().invoke(app, ["info", "calc", "--json"])
    assert info.exit_code == 0, info.output
    assert json.loads(info.output)["client_options"] == listed["calc"]["client_options"]


async def test_the_websocket_door_applies_the_same_rules(url: str) -> None:
    async with aiohttp.ClientSession() as client, client.ws_connect(f"{url}/v1/ws") as ws:
        await ws.send_str(json.dumps({"op": "create", "env": "machine", "session_id": "w1",
                                      "options": {"sandbox": "local"}}))
        reply = json.loads(await ws.receive_str(timeout=10))
        assert reply["status"] == 400 and reply["error"]["code"] == "invalid_request"
        assert "'sandbox'" in reply["error"]["message"]


def test_the_swe_sandbox_cannot_be_switched_off(start_server: Callable[..., str]) -> None:
    """The issue's exploit: ``envhub serve swe --sandbox docker``, then a client asks for
    ``{"sandbox": "local"}`` (a root shell on the host)."""
    pytest.importorskip("envhub_swe")
    url = start_server(envs=["swe"])
    response = httpx.post(f"{url}/v1/sessions", timeout=30,
                          json={"env": "swe", "options": {"sandbox": "local"}})
    assert response.status_code == 400, response.text
    assert "'sandbox'" in response.json()["error"]["message"]
