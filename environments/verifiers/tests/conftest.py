"""Fixtures of the verifiers bridge's tests: the verifiers venv (``.ci/verifiers_setup.sh``),
the tasksets written against verifiers' public API in ``vf_tasksets/``, and the scripted
judge endpoint ``vf_judged``'s judges are pointed at."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from envhub_verifiers import VerifiersEnv, default_python

import envhub
from envhub._util.net import bound_socket
from envhub.policies import ReferencePolicy
from envhub.rollout.dispatcher import EpisodeSpec
from envhub.rollout.episode import EpisodeRunner
from envhub.trajectory import Trajectory
from tests.rollout.scripted_server import ScriptConfig, ScriptedServer

TASKSETS = Path(__file__).with_name("vf_tasksets")


def verifiers_problem() -> str | None:
    """Why the bridge cannot run here (no verifiers venv), or None; with CI's
    ``ENVHUB_REQUIRE_VERIFIERS=1`` a missing venv fails instead of skipping."""
    if default_python().exists():
        return None
    problem = f"no verifiers venv at {default_python()}: run .ci/verifiers_setup.sh"
    if os.environ.get("ENVHUB_REQUIRE_VERIFIERS") == "1":
        pytest.fail(f"ENVHUB_REQUIRE_VERIFIERS=1 but {problem}")
    return problem


MakeEnv = Callable[..., envhub.LocalEnvironment]


@pytest.fixture(scope="session")
def make_env() -> MakeEnv:
    """``make_env(taskset, **options)``: the bridge over one of the test tasksets (one
    worker process per taskset and options, shared by every environment made so)."""

    def make(taskset: str, **options: object) -> envhub.LocalEnvironment:
        return envhub.make("verifiers", taskset=taskset, path=str(TASKSETS), **options)

    return make


@pytest.fixture(scope="session", autouse=True)
def _workers() -> Iterator[None]:
    """Skip without verifiers; stop the worker processes after the session (a worker
    imports verifiers, about 5 CPU-s: the modules share them, one per taskset)."""
    problem = verifiers_problem()
    if problem is not None:
        pytest.skip(problem)
    yield
    asyncio.run(VerifiersEnv.aclose_shared())


Answering = Callable[[envhub.LocalEnvironment, str, str], Awaitable[Trajectory]]


@pytest.fixture(scope="session")
def answering() -> Answering:
    """``await answering(env, task_id, answer)``: one episode through envhub's episode
    runner (one attempt): the task's gold calls, then ``answer`` as the final message."""

    async def run(env: envhub.LocalEnvironment, task_id: str, answer: str) -> Trajectory:
        task = (await env.task(task_id)).model_copy(update={"answer": answer})
        runner = EpisodeRunner(env, ReferencePolicy(), max_env_attempts=1,
                               task_of=lambda _: task)  # fmt: skip
        return await runner.run(EpisodeSpec(task_id=task_id, sample_index=0, group_id="t"))

    return run


def scripted_judge(messages: list[dict[str, Any]]) -> str:
    """A judge that reads its prompt as verifiers' built-in templates lay it out: the
    reference answer (``reference.txt``: before the response) against the response
    (between ``Response:`` and the template's closing lines, which come after anything
    the model wrote), or the criteria of ``vf_judged_rubric.toml`` (``rubric.txt``,
    answered in the JSON the rubric judge asks for). Its verdict depends on its prompt
    only, whatever the order of concurrent calls."""
    prompt = str(messages[-1]["content"])
    start = prompt.index("Response:\n```\n") + len("Response:\n```\n")
    if "\nCriteria:\n" in prompt:
        response = prompt[start : prompt.rindex("\n```\n\nCriteria:\n")]
        met = {"numeric": response.strip().isdigit(), "explained": len(response.split()) > 3}
        return json.dumps({"verdicts": [
            {"name": name, "reason": "scripted", "verdict": "yes" if ok else "no"}
            for name, ok in met.items()]})  # fmt: skip
    reference = prompt.split("Reference answer:\n```\n", 1)[1].split("\n```", 1)[0]
    response = prompt[start : prompt.rindex("\n```\n\nRespond either")]
    return "yes" if response.strip() == reference.strip() else "no"


class JudgeEndpoint:
    """The judge endpoint ``vf_judged``'s judges are pointed at: the scripted model server
    on 127.0.0.1 answering as :func:`scripted_judge` (a little latency, so concurrent
    scorings overlap there), which a test can take down and bring back on its port."""

    def __init__(self) -> None:
        self.config = ScriptConfig(judge=scripted_judge, latency_s=0.05)
        self.server = ScriptedServer(self.config).start()
        self.base_url = self.server.base_url

    @contextlib.contextmanager
    def down(self) -> Iterator[None]:
        """Nothing answers at the endpoint within the block (its port is held bound and
        never listened on: connections are refused); the same server after it."""
        port = self.server.port
        self.server.stop()
        held = bound_socket("127.0.0.1", port)
        try:
            yield
        finally:
            held.close()
            self.server = ScriptedServer(self.config, port=port).start()


@pytest.fixture(scope="session")
def judge_endpoint() -> Iterator[JudgeEndpoint]:
    endpoint = JudgeEndpoint()
    yield endpoint
    endpoint.server.stop()


@pytest.fixture(scope="session")
def judge_down(judge_endpoint: JudgeEndpoint) -> Callable[[], AbstractContextManager[None]]:
    """``with judge_down():`` the judge endpoint is down (:meth:`JudgeEndpoint.down`)."""
    return judge_endpoint.down


@pytest.fixture(scope="session")
def judge_faults(judge_endpoint: JudgeEndpoint) -> deque[str]:
    """The judge endpoint's faults, consumed one per request (``tests/rollout``)."""
    return judge_endpoint.config.faults


def judges_at(base_url: str) -> dict[str, Any]:
    """``vf_judged``'s ``taskset_args``: the ``[env.taskset]`` keys of a verifiers config
    plugging a reference judge (weight 2) and a rubric judge into the task config, both
    at ``base_url``; ``vf-eval`` reads the same keys from a config file."""
    endpoint = {"base_url": base_url, "model": "judge"}
    return {"task": {"judges": [
        {"id": "reference", "weight": 2.0, **endpoint},
        {"id": "rubric", "path": str(TASKSETS / "vf_judged_rubric.toml"),
         "view": "last_reply", **endpoint},
    ]}}  # fmt: skip


@pytest.fixture(scope="session")
def judged_args(judge_endpoint: JudgeEndpoint) -> dict[str, Any]:
    """``vf_judged``'s judges at :class:`JudgeEndpoint` (one worker for every module)."""
    return judges_at(judge_endpoint.base_url)
