"""Hostile answers against the datasets whose scorers evaluate the answer text.

Through a real server holding a token, the issue's probe (sympy's ``x!`` transformation
reaching an ``exec`` that writes a file and forges score lines) runs nothing, returns
nothing of the server's, and leaves the episodes after it alone. The shared corpus
(:mod:`envhub.testing.hostile`) scores as a plain wrong answer on the default scorer and under
bubblewrap: the whole corpus on one dataset, a representative part on the others."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from envhub_reasoning_gym import UNPARSEABLE
from reasoning_gym.factory import create_dataset

import envhub
from envhub.sandboxes.bwrap import bwrap_problem
from envhub.server import create_app
from envhub.task import GoldCall
from envhub.testing import check_hostile_answers, serve_in_thread
from envhub.testing.hostile import hostile_answers

TOKEN = "envhub-hostile-test-token-5f1c2e"
#: the datasets the issue saw run code: each scores with sympy's parse_expr
SYMPY_DATASETS = [
    "countdown",
    "puzzle24",
    "simple_integration",
    "intermediate_integration",
    "polynomial_multiplication",
]


#: how the code reaches ``exec``: the issue's probe (not Python, no ``__`` or ``lambda``;
#: sympy makes it ``factorial(exec(...))``) and a walrus on the integration variable
#: (``X`` in these tasks), which the scorer's ``local_dict`` leaves a bare name
SHAPES = {"factorial": "exec({code!r})!", "walrus": "(X := exec({code!r}))"}


def _injection(marker: Path, shape: str) -> str:
    """Code in ``shape`` (:data:`SHAPES`) that writes the token to ``marker`` and a forged error
    carrying the token, then forged scores, to every file descriptor."""
    code = (
        "import os\n"
        "token = os.environ.get('ENVHUB_TOKEN', '')\n"
        f"open({str(marker)!r}, 'w').write(token)\n"
        'lines = (\'{"error": "%s"}\\n\' % token).encode() + b\'{"score": 1.0}\\n\' * 8\n'
        "for fd in range(64):\n"
        "    try:\n"
        "        os.write(fd, lines)\n"
        "    except OSError:\n"
        "        pass\n"
    )
    return SHAPES[shape].format(code=code)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    env = envhub.make("reasoning_gym", datasets=",".join(SYMPY_DATASETS), size=1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ENVHUB_TOKEN", TOKEN)  # as `envhub serve` has it
        with serve_in_thread(create_app({"reasoning_gym": env}, token=TOKEN)) as url:
            yield url


async def _answer(http: httpx.AsyncClient, task_id: str, answer: str) -> list[httpx.Response]:
    """An episode that answers ``answer``: what the server returned to its step and close."""
    created = await http.post("/v1/sessions", json={"env": "reasoning_gym", "task_id": task_id})
    assert created.status_code == 200, created.text
    call = {"id": "1", "name": "answer", "arguments": {"answer": answer}}
    session = created.json()["session_id"]
    step = await http.post(f"/v1/sessions/{session}/step", json={"tool_calls": [call]})
    assert step.status_code == 200 and step.json()["done"], step.text
    return [step, await http.post(f"/v1/sessions/{session}/close")]


@pytest.mark.parametrize(
    ("dataset", "shape"),
    [(dataset, "factorial") for dataset in SYMPY_DATASETS] + [("simple_integration", "walrus")],
)
async def test_code_in_an_answer_never_runs_nor_forges_later_rewards(
    server: str, dataset: str, shape: str, tmp_path: Path
) -> None:
    marker = tmp_path / "ran-in-the-scorer"
    entry = create_dataset(dataset, seed=0, size=1)[0]
    official = create_dataset(dataset, seed=0, size=1).score_answer
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=server, timeout=120, headers=headers) as http:
        hostile = await _answer(http, f"{dataset}-0-0000", _injection(marker, shape))
        later = [await _answer(http, f"{dataset}-0-0000", "0") for _ in range(4)]
    assert not marker.exists(), f"the answer ran code in the scorer: {marker.read_text()!r}"
    step, closed = hostile
    assert step.json()["reward"] == official(UNPARSEABLE, entry)  # scored, as unparseable
    assert "refused" in closed.json()["info"]["score_error"]
    assert [step.json()["reward"] for step, _ in later] == [official("0", entry)] * 4
    for response in [*hostile, *(r for episode in later for r in episode)]:
        assert TOKEN not in response.text


def _answer_calls(text: str) -> list[GoldCall]:
    return [GoldCall(name="answer", arguments={"answer": text})]


def _sandbox_or_skip(sandbox: str | None) -> None:
    if sandbox == "bwrap" and (problem := bwrap_problem()):
        if os.environ.get("ENVHUB_REQUIRE_BWRAP") == "1":
            pytest.fail(f"bwrap required (ENVHUB_REQUIRE_BWRAP=1) but {problem}")
        pytest.skip(problem)


def _is_unicode(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


#: (dataset, a plain wrong answer that scores as unparseable text does, every answer of
#: the corpus or every third: the corpus is grouped by kind, so each kind comes up)
_CASES = [
    ("polynomial_multiplication", "0", 1),
    ("simple_integration", "0", 3),
    ("intermediate_integration", "0", 3),
    ("puzzle24", "0", 3),
    ("countdown", "", 3),  # "0" parses, so countdown scores it above unparseable text
    ("n_queens", "0", 3),  # Python's eval, not sympy
]
#: where a wrong answer scores above 0: an answer that is not valid Unicode is the
#: model's error observation, never an answer, so its episode scores 0 as unanswered
_WRONG_SCORES_ABOVE_ZERO = {"puzzle24", "countdown"}


@pytest.mark.parametrize("sandbox", [None, "bwrap"])
@pytest.mark.parametrize(("dataset", "plain_wrong", "stride"), _CASES)
def test_hostile_answer_corpus_scores_as_a_plain_wrong_answer(
    dataset: str, plain_wrong: str, stride: int, sandbox: str | None, tmp_path: Path
) -> None:
    _sandbox_or_skip(sandbox)
    marker = tmp_path / "ran-on-the-host"
    answers = hostile_answers(str(marker))[::stride]
    if dataset in _WRONG_SCORES_ABOVE_ZERO:
        answers = [answer for answer in answers if _is_unicode(answer)]

    async def run() -> None:
        env = envhub.make("reasoning_gym", datasets=dataset, size=1, sandbox=sandbox)
        try:
            await check_hostile_answers(
                env,
                f"{dataset}-0-0000",
                _answer_calls,
                plain_wrong=plain_wrong,
                answers=answers,
            )
        finally:
            await env.aclose()

    asyncio.run(run())
    assert not marker.exists()
