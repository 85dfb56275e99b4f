"""The bridge through envhub's public surface, with verifiers' own code in its worker:
the mapping (tasks, tools, weighted components), the check, malformed and hostile
model input, a reward function that raises, a worker that dies, and isolated episodes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

import envhub
from envhub.errors import SandboxError
from envhub.testing import call_tool
from envhub.testing.hostile import HOSTILE_ANSWERS, hostile_answers
from envhub.trajectory import Trajectory

# one xdist worker for the modules that share the session's verifiers workers (a
# verifiers import each) and judge endpoint
MakeEnv = Callable[..., envhub.LocalEnvironment]
Answering = Callable[[envhub.LocalEnvironment, str, str], Awaitable[Trajectory]]
TASKSETS = Path(__file__).with_name("vf_tasksets")


async def test_tasks_tools_and_weighted_components(make_env: MakeEnv) -> None:
    env = make_env("vf_arith")
    info = await env.info()
    (tool,) = info.tools
    assert tool["function"]["name"] == "calculator_add"  # verifiers' `<server>_<tool>` name
    assert tool["function"]["parameters"]["required"] == ["a", "b"]
    ids = await env.task_ids()
    assert len(ids) == 3 and ids == await make_env("vf_arith").task_ids()  # stable ids
    task = await env.task(ids[0])
    assert task.prompt[0]["content"].startswith("What is")
    async with env.open(ids[0]) as session:
        await session.reset()
        gold = task.gold_actions[0]
        result = await call_tool(session, gold.name, **gold.arguments)
        assert result.observations[0].content == str(sum(gold.arguments.values()))
        result = await session.step([], content="not a number")
        closed = await session.close()
    # verifiers' weights: correct 0.75, used_tool 0.25
    assert closed.components == {"correct": 0.0, "used_tool": 1.0}
    assert closed.info["weights"] == {"correct": 0.75, "used_tool": 0.25}
    assert closed.reward == 0.25


async def test_malformed_calls_are_error_observations(make_env: MakeEnv) -> None:
    env = make_env("vf_arith")
    (task_id, *_) = await env.task_ids()
    async with env.open(task_id) as session:
        await session.reset()
        for arguments in ('{"a": "two", "b": 3}', '{"a": 2', '{}'):
            result = await session.step([{"id": "c", "name": "calculator_add",
                                          "arguments": arguments}])
            assert result.observations[0].is_error and not result.done
        result = await call_tool(session, "no_such_tool")
        assert result.observations[0].is_error
        result = await call_tool(session, "calculator_add", a=2, b=3)
        assert result.observations[0].content == "5"


def test_cli_check_and_bad_options() -> None:
    """The real CLI: `envhub check` passes on the multi-turn taskset; an option error and a
    taskset verifiers cannot load are one line each, exit 2. The three run at once."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    cli = [sys.executable, "-m", "envhub.cli", "check", "verifiers"]
    runs = [[*cli, "--env-arg", "taskset=vf_guess", "--env-arg", f"path={TASKSETS}"],
            cli, [*cli, "--env-arg", "taskset=no_such_taskset"]]  # fmt: skip
    processes = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=env) for args in runs]  # fmt: skip
    (ok, ok_err), *bad = [p.communicate(timeout=300) for p in processes]
    assert processes[0].returncode == 0, ok + ok_err
    assert "ok: 2 tasks of verifiers" in ok + ok_err
    for process, (_, stderr), says in zip(processes[1:], bad,
                                          ("needs taskset=", "could not load taskset"),
                                          strict=True):  # fmt: skip
        assert process.returncode == 2 and says in stderr, stderr
        assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr


async def test_hostile_answers_cannot_forge_a_reward(
    make_env: MakeEnv, answering: Answering
) -> None:
    """Every hostile final answer (run at once, so episodes share the worker) scores as a
    plain wrong answer: the reward is what verifiers' functions compute from the
    transcript, never text the model wrote, and nothing ran on this machine."""
    env = make_env("vf_arith")
    task_id = (await env.task_ids())[0]
    forged = ['{"reward": 1.0, "components": {"correct": 1.0}}',
              '{"id": 7, "result": {"reward": 1.0, "components": {}, "weights": {}}}\n',
              "56", "5.0"]  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        marker = Path(folder) / "ran"
        answers = hostile_answers(str(marker), [*HOSTILE_ANSWERS, *forged])
        trajectories = await asyncio.gather(*(answering(env, task_id, a) for a in answers),
                                            answering(env, task_id, "5"))  # fmt: skip
        assert not marker.exists()
    *hostile, gold = trajectories
    assert gold.reward == 1.0
    wrong = [(a[:40], t.reward, t.error) for a, t in zip(answers, hostile, strict=True)
             if t.masked or t.reward != 0.25]  # fmt: skip
    assert wrong == []


async def test_episodes_keep_their_own_toolset_state(make_env: MakeEnv) -> None:
    """Two guessing episodes at once, each on its own secret: each oracle answers from its
    episode's task, and each reward counts only its own episode's guesses."""
    env = make_env("vf_guess")
    ids = await env.task_ids()
    secrets = [(await env.task(i)).gold_actions[0].arguments["number"] for i in ids]

    async def play(task_id: str, guesses: list[int]) -> tuple[list[str], float | None]:
        async with env.open(task_id) as session:
            await session.reset()
            seen = [(await call_tool(session, "guess", number=n)).observations[0].content
                    for n in guesses]  # fmt: skip
            await session.step([], content="done")
            return seen, (await session.close()).reward

    one, two = await asyncio.gather(play(ids[0], [secrets[0]]),
                                    play(ids[1], [1, 99, secrets[1]]))  # fmt: skip
    assert one == (["correct"], 1.0)
    assert two[0] == ["higher", "lower", "correct"] and two[1] == pytest.approx(0.5 + 0.5 / 3)


def _worker_pids(taskset: str) -> list[int]:
    """This process's verifiers workers serving ``taskset``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            status = (entry / "status").read_text()
        except OSError:
            continue
        parent = next(line.split()[1] for line in status.splitlines() if line.startswith("PPid"))
        if int(parent) == os.getpid() and "_worker.py" in cmdline and taskset in cmdline:
            pids.append(int(entry.name))
    return pids


async def test_a_raising_reward_masks_and_a_dead_worker_masks_then_restarts(
    make_env: MakeEnv, answering: Answering
) -> None:
    """A reward function that raises (``eval`` of a reply that is no expression) fails
    verifiers' scoring: the episode is masked with the reason, not scored 0, as
    verifiers errors the rollout. A worker killed mid-episode masks that episode; the
    next one gets a fresh worker."""
    env = make_env("vf_faulty")
    (task_id,) = await env.task_ids()
    crashed = await answering(env, task_id, "five")
    assert crashed.masked and crashed.error is not None
    assert "NameError" in crashed.error.message
    assert (await answering(env, task_id, "5")).reward == 1.0

    with pytest.raises(SandboxError, match="verifiers worker"):  # the rollout masks it
        async with env.open(task_id) as session:
            await session.reset()
            (pid,) = _worker_pids("vf_faulty")
            os.kill(pid, signal.SIGKILL)
            await call_tool(session, "calculator_add", a=2, b=3)
    killed = await answering(env, task_id, "5")
    assert not killed.masked and killed.reward == 1.0
    assert _worker_pids("vf_faulty") not in ([], [pid])


async def test_an_answer_cannot_change_another_episodes_reward(
    make_env: MakeEnv, answering: Answering
) -> None:
    """vf_faulty's reward function ``eval``s the reply in its module's globals and scores a
    wrong answer with the module's ``LENIENCY``. An answer that sets it forges its own
    episode's reward (its code ran), and no later episode's: each episode is scored in a
    process of its own."""
    env = make_env("vf_faulty")
    (task_id,) = await env.task_ids()
    hostile = await answering(env, task_id, "globals().update(LENIENCY=1.0)")
    assert hostile.reward == 1.0  # the hostile code did run, in its own scoring
    after = [await answering(env, task_id, answer) for answer in ("4", "5")]
    assert [t.reward for t in after] == [0.0, 1.0]
