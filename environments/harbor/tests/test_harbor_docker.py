"""Harbor and Terminal-Bench tasks built and graded in Docker: the shipped task, a task
whose solution fails, terminal-bench's own template (from its wheel), an unbuildable
task, an agent that tries to forge its verdict, and a container that dies mid-episode."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from envhub_harbor import TaskBuildError

import envhub
from envhub.sandboxes.docker_cli import run_docker
from envhub.task import GoldCall
from envhub.testing import replay_calls

TASKS = Path(__file__).parent / "tasks"

pytestmark = pytest.mark.usefixtures("docker_ready")

SHIPPED = Path(__file__).parents[1] / "envhub_harbor" / "tasks"
TEMPLATE_INSTRUCTION = "Create a file /app/hello-world.txt that contains 'Hello, world!'.\n"
#: run-tests.sh of the template with its network installs (apt-get curl, the uv installer,
#: `uv add pytest`) replaced by the same pytest from wheels shipped in the tests folder
OFFLINE_RUN_TESTS = """#!/bin/bash
# pytest 8.4.1 imported from its wheels (zip files on the path); -P keeps the working
# directory, which the agent owns, off the path
export PYTHONPATH=$(printf '%s:' $TEST_DIR/wheels/*.whl)
python3 -P -m pytest -p no:cacheprovider $TEST_DIR/test_outputs.py -rA
"""


def terminal(command: str) -> GoldCall:
    return GoldCall(name="terminal", arguments={"command": command})


FINISH = GoldCall(name="finish")


@pytest.fixture(scope="module")
def own_tasks() -> envhub.LocalEnvironment:
    """The task whose solution fails (tests/tasks)."""
    return envhub.make("harbor", tasks=str(TASKS))


@pytest.fixture(scope="module")
def shipped() -> envhub.LocalEnvironment:
    """The shipped task, whose solution passes (the default ``tasks``)."""
    return envhub.make("harbor")


def _template_copy(template: Path, where: Path) -> Path:
    """A task made from the template as ``tb tasks create`` makes one: its files and a
    task.yaml with the instruction (the wizard asks for it)."""
    task = where / "template-task"
    shutil.copytree(template, task)
    (task / "task.yaml").write_text(
        f"instruction: |-\n  {TEMPLATE_INSTRUCTION.strip()}\ndifficulty: easy\n"
        "max_agent_timeout_sec: 360.0\nmax_test_timeout_sec: 120.0\n"
    )
    return task


def test_shipped_task_passes_envhub_check() -> None:
    """`envhub check` (the reference policy runs solution/solve.sh, a no-op policy
    nothing) in a real subprocess, as a user runs it."""
    proc = subprocess.run(
        [sys.executable, "-m", "envhub.cli", "check", "harbor", "--env-arg", f"tasks={SHIPPED}"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ok: 1 tasks of harbor: reference scores 1, no-op scores 0" in proc.stdout + proc.stderr


async def test_failing_solution_scores_zero_and_a_right_answer_one(
    own_tasks: envhub.LocalEnvironment,
) -> None:
    task = await own_tasks.task("median-off-by-one")
    gold, right, wrong_format = await asyncio.gather(
        replay_calls(own_tasks, task.id, task.gold_actions),
        replay_calls(own_tasks, task.id, [terminal("echo 42.5 > median.txt"), FINISH]),
        replay_calls(own_tasks, task.id, [terminal("echo forty > /app/median.txt"), FINISH]),
    )
    assert not gold.masked and gold.reward == 0.0
    assert "expected 42.5, got 45.0" in gold.reward_info["test_output"]
    assert not right.masked and right.reward == 1.0
    assert not wrong_format.masked and wrong_format.reward == 0.0
    assert "no median" in wrong_format.reward_info["test_output"]


async def test_reward_json_components(shipped: envhub.LocalEnvironment) -> None:
    """reward.json's named rewards are the reward's components, ``reward`` its value. An
    agent that ran no command gets the verdict on the untouched image, graded once."""
    wrong = await replay_calls(shipped, "count-errors", [terminal("echo 4 > answer.txt"), FINISH])
    assert wrong.reward == 0.0
    assert wrong.reward_components == {"reward": 0.0, "answer_present": 1.0}
    assert "untouched" not in wrong.reward_info
    idle = [await replay_calls(shipped, "count-errors", [FINISH]) for _ in range(2)]
    for trajectory in idle:
        assert not trajectory.masked and trajectory.reward == 0.0
        assert trajectory.reward_components == {"reward": 0.0, "answer_present": 0.0}
        assert trajectory.reward_info["untouched"] is True


async def test_terminal_bench_template_from_its_wheel(
    tb_template: Path, wheels_of_pytest: Path, tmp_path: Path
) -> None:
    """The template as shipped: its run-tests.sh installs uv and pytest from the
    internet, so in a container without network its verdict is 0 whatever the agent did
    (as Harbor's would be). With those installs made offline, its own test decides: the
    template's solution.sh writes hello.txt where test_outputs.py wants hello-world.txt
    (0), an agent writing hello-world.txt scores 1."""
    verbatim = _template_copy(tb_template, tmp_path / "verbatim")
    offline = _template_copy(tb_template, tmp_path / "offline")
    (offline / "run-tests.sh").write_text(OFFLINE_RUN_TESTS)
    shutil.copytree(wheels_of_pytest, offline / "tests" / "wheels")
    as_shipped = envhub.make("harbor", tasks=str(verbatim))
    made_offline = envhub.make("harbor", tasks=str(offline))
    task = await as_shipped.task("template-task")
    assert task.prompt[0]["content"] == TEMPLATE_INSTRUCTION.strip()
    assert task.metadata["format"] == "terminal-bench"
    hello = [terminal("echo 'Hello, world!' > /app/hello-world.txt"), FINISH]
    shipped_gold, offline_gold, offline_hello = await asyncio.gather(
        replay_calls(as_shipped, task.id, task.gold_actions),
        replay_calls(made_offline, task.id, task.gold_actions),
        replay_calls(made_offline, task.id, hello),
    )
    assert not shipped_gold.masked and shipped_gold.reward == 0.0
    assert "uv: command not found" in shipped_gold.reward_info["test_output"]
    assert offline_gold.reward == 0.0
    assert "FAILED" in offline_gold.reward_info["test_output"]
    assert "hello-world.txt does not exist" in offline_gold.reward_info["test_output"]
    assert offline_hello.reward == 1.0, offline_hello.reward_info["test_output"]
    assert "1 passed" in offline_hello.reward_info["test_output"]


def _task_with_dockerfile(where: Path, dockerfile: str) -> Path:
    task = where / "broken"
    shutil.copytree(TASKS / "median-off-by-one", task)
    (task / "environment" / "Dockerfile").write_text(dockerfile)
    return where


@pytest.mark.parametrize(
    ("dockerfile", "said"),
    [
        ("FROM python:3.13-slim\nRUN echo building && exit 3\n", "docker build failed"),
        ("FROM registry.example/never-pulled:1\n", "base_images='registry.example/never-pulled:1"),
    ],
    ids=["failing-run", "unmapped-base"],
)
def test_unbuildable_task_is_a_clear_error(tmp_path: Path, dockerfile: str, said: str) -> None:
    tasks = _task_with_dockerfile(tmp_path, dockerfile)
    with pytest.raises(TaskBuildError, match="task broken: .*" + said.split("'")[0]):
        envhub.make("harbor", tasks=str(tasks)).tasks  # noqa: B018 (loading builds)
    proc = subprocess.run(
        [sys.executable, "-m", "envhub.cli", "check", "harbor", "--env-arg", f"tasks={tasks}"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2
    assert said in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


async def test_agent_cannot_forge_its_verdict(own_tasks: envhub.LocalEnvironment) -> None:
    """A wrong answer plus every way the agent has to pre-empt or overwrite the verdict:
    planting reward files, a daemon that keeps writing them, one that fixes the answer
    once grading has begun, tests of its own, Python startup hooks for the verifier. All
    fail; the episode is scored 0, not masked."""
    forge = [
        terminal("mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt"),
        terminal("mkdir -p /tests && printf '#!/bin/sh\\necho 1 > /logs/verifier/reward.txt\\n'"
                 " > /tests/test.sh"),
        terminal("setsid sh -c 'while :; do echo 1 > /logs/verifier/reward.txt; "
                 "echo {\\\"reward\\\": 1} > /logs/verifier/reward.json; sleep 0.05; done' "
                 ">/dev/null 2>&1 < /dev/null &"),
        # a daemon that waits for grading to start, then puts the right answer in place
        terminal("setsid sh -c 'until [ -e /tests/test.sh ]; do sleep 0.01; done; "
                 "echo 42.5 > /app/median.txt' >/dev/null 2>&1 < /dev/null &"),
        terminal("d=$HOME/.local/lib/python3.11/site-packages && mkdir -p $d && "
                 "echo 'import os; os.system(\"echo 1 > /logs/verifier/reward.txt\")' > $d/x.pth"),
        terminal("echo 'import os; os.system(\"echo 1 > /logs/verifier/reward.txt\")' "
                 "> /usr/lib/python3/dist-packages/x.pth"),
        terminal("echo 45.0 > median.txt"),
        FINISH,
    ]
    trajectory = await replay_calls(own_tasks, "median-off-by-one", forge)
    assert not trajectory.masked and trajectory.metrics.episode_attempts == 1
    assert trajectory.reward == 0.0, trajectory.reward_info
    # and the same container machinery still scores a right answer 1 right after
    right = await replay_calls(own_tasks, "median-off-by-one", [terminal("echo 42.5 > median.txt")])
    assert right.reward == 1.0


async def _remove_the_sleeping_container() -> None:
    """Wait for this process's task container running ``sleep 3`` (the warm pool holds
    idle ones too), then remove it from outside."""
    label = f"label=envhub.owner.pid={os.getpid()}"
    while True:
        found = await asyncio.to_thread(
            run_docker, "ps", "-q", "--filter", "label=envhub.pool=harbor", "--filter", label
        )
        for cid in found.stdout.split():
            top = await asyncio.to_thread(run_docker, "top", cid)
            if "sleep 3" in top.stdout:
                await asyncio.to_thread(run_docker, "rm", "-f", cid)
                return
        await asyncio.sleep(0.2)


async def test_a_container_that_dies_mid_episode_masks_the_episode(
    shipped: envhub.LocalEnvironment,
) -> None:
    """The container removed under a running command: an infrastructure failure, so the
    attempt is masked (never scored 0) and the rollout runs the episode again in a new
    container, where the solution scores 1."""
    task = await shipped.task("count-errors")
    calls = [terminal("sleep 3"), *task.gold_actions]
    killer = asyncio.create_task(_remove_the_sleeping_container())
    retried = await replay_calls(shipped, task.id, calls, max_env_attempts=2)
    await killer
    assert not retried.masked and retried.reward == 1.0
    assert retried.metrics.episode_attempts == 2
    assert retried.metrics.retried_errors == {"sandbox_error": 1}
