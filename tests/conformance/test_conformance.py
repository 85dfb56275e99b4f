"""The conformance suite over every shipped environment and every transport: in-process
(``LocalEnvironment``), HTTP and WebSocket (``RemoteEnvironment`` against a real uvicorn
server on 127.0.0.1 hosting the same environment and options).

One server per environment serves its HTTP and WebSocket runs; the in-process run comes
last, since closing a ``LocalEnvironment`` releases the environment class's shared
resources (``aclose_shared``: sandbox pools, workers, an OpenEnv server), which the
server's environment in this process shares and would otherwise start again. Each
environment runs on one task (SWE: a task of the CI subset's fastest repository, on the
local sandbox backend and on Docker). Web runs in text mode and in browser mode, MiniWoB
in its browser, in process only (web's browser mode covers a browser over the wire).
Without Docker or Chromium those cases skip, unless CI's ``ENVHUB_REQUIRE_DOCKER=1`` /
``ENVHUB_REQUIRE_CHROMIUM=1`` make that a failure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

import envhub
import envhub.clients.remote
from envhub.clients.remote import RemoteEnvironment
from envhub.protocol import EnvironmentClient
from envhub.server import create_app
from envhub.task import GoldCall, Task
from envhub.testing import serve_in_thread
from envhub.testing.conformance import CHECKS, check_client_conformance
from tests.bridges import (
    openenv_adder,
    openenv_problem,
    unless_required,
    verifiers_guess,
    verifiers_problem,
)
from tests.images.conftest import docker_problem

TRANSPORTS = ("http", "ws", "local")  # local last: closing it releases shared resources


def _swe_ci_task() -> list[str]:
    """The first task of inflection, the CI subset's fastest repository."""
    from envhub_swe.instances import load_instances

    return [next(t.id for t in load_instances() if t.metadata["repo"] == "pypi/inflection")]


def _swe_fork_prefix(task: Task) -> list[GoldCall]:
    """A new file appended to, then read as the probe: the working tree a fork carries.
    Its name is a test file's, which grading leaves out, so the sessions the check ends
    (over HTTP and WebSocket an abort is a close) score an empty change at once; the gold
    edit would make each of them run the repository's tests."""
    probe = "test_envhub_fork_probe.py"
    return [GoldCall(name="bash", arguments={"command": f"echo '# forked' >> {probe}"}),
            GoldCall(name="bash", arguments={"command": f"cat {probe}"})]


def _chromium_problem() -> str | None:
    from envhub_web.pool import find_chromium

    if find_chromium() is not None:
        return None
    return unless_required("ENVHUB_REQUIRE_CHROMIUM", "no Chromium (apt-get install -y chromium)")




@dataclass(frozen=True)
class Case:
    """One environment with the options it is hosted and opened with."""

    env: str
    options: dict[str, Any] = field(default_factory=dict)
    task_ids: Callable[[], list[str] | None] = lambda: None
    problem: Callable[[], str | None] = lambda: None  # why it cannot run here, if so
    fork_prefix: Callable[[Task], list[GoldCall]] = lambda task: task.gold_actions
    transports: tuple[str, ...] = TRANSPORTS

    def local(self) -> envhub.LocalEnvironment:
        return envhub.make(self.env, **self.options)


CASES = {
    "calc": Case("calc"),
    "sql": Case("sql"),
    "search": Case("search"),
    "swe-local": Case("swe", {"sandbox": "local"}, task_ids=_swe_ci_task,
                      fork_prefix=_swe_fork_prefix),
    "swe-docker": Case("swe", {"sandbox": "docker"}, task_ids=_swe_ci_task,
                       problem=docker_problem, fork_prefix=_swe_fork_prefix),
    "web-text": Case("web", {"mode": "text"}),
    "web-browser": Case("web", {"mode": "browser"}, problem=_chromium_problem),
    # the web plugin's browser again (its sessions cost a CPU-second each): what a browser
    # page's observations make of each transport's encoding, web-browser covers
    "miniwob": Case("miniwob", problem=_chromium_problem, transports=("local",)),
    "support": Case("support"),
    "mcp": Case("mcp", {"task_set": "time-zones"}, task_ids=lambda: ["time-zones-01"]),
    "harbor": Case("harbor", task_ids=lambda: ["count-errors"], problem=docker_problem,
                   fork_prefix=lambda task: [GoldCall(name="terminal", arguments={
                       "command": "echo forked >> probe.txt && cat probe.txt"})]),
    "openenv": Case("openenv", openenv_adder(), task_ids=lambda: ["add-0"],
                    problem=openenv_problem),
    "verifiers": Case("verifiers", verifiers_guess(), problem=verifiers_problem),
}  # fmt: skip


@pytest.fixture(scope="module")
def case(request: pytest.FixtureRequest) -> Case:
    chosen = CASES[request.param]
    problem = chosen.problem()
    if problem is not None:
        pytest.skip(problem)
    return chosen


@pytest.fixture(scope="module")
def server_url(case: Case) -> Iterator[str]:
    """A real server hosting the case's environment with the case's options."""
    with serve_in_thread(create_app({case.env: case.local()})) as url:
        yield url


async def _answers_as_in_process(remote: EnvironmentClient, case: Case) -> None:
    """A remote client answers info() and every task listing exactly as the in-process
    environment with the same options does."""
    local = case.local()  # opens no session, so it has nothing to release
    info = await local.info()
    assert await remote.info() == info
    for split in (None, *info.splits):
        assert await remote.task_ids(split) == await local.task_ids(split), split


@pytest.mark.parametrize(
    ("case", "transport"),
    [(name, transport) for name, case in CASES.items() for transport in case.transports],
    indirect=["case"],
    ids=[f"{name}-{transport}" for name, case in CASES.items() for transport in case.transports],
)
async def test_client_conforms(
    case: Case,
    transport: Literal["local", "http", "ws"],
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client: EnvironmentClient
    if transport == "local":
        client = case.local()
    else:
        monkeypatch.setattr(envhub.clients.remote, "_TASK_PAGE", 100)  # listings span several pages
        client = RemoteEnvironment(request.getfixturevalue("server_url"), case.env,
                                   transport=transport)  # fmt: skip
    task_ids = case.task_ids()
    gold = await case.local().task(task_ids[0] if task_ids else (await client.task_ids())[0])
    try:
        report = await check_client_conformance(client, task_ids=task_ids,
                                                fork_prefix=case.fork_prefix(gold))
        if transport != "local":
            await _answers_as_in_process(client, case)
    finally:
        await client.aclose()
    assert report.passed == list(CHECKS)
