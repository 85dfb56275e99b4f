"""Hostile tool calls are the model's outcome: error observations and a scored episode,
never an infrastructure failure that masks the episode (and retries it), which a policy
could otherwise trigger at will to escape a bad reward.

Each episode runs through the rollout path (``EpisodeRunner`` with episode retries on,
as ``envhub rollout`` runs it), replaying a scripted list of calls, on every backend.
"""

from __future__ import annotations

import os

import pytest

import envhub
from envhub.policies.reference import ReferencePolicy
from envhub.rollout.episode import EpisodeRunner, EpisodeSpec
from envhub.sandboxes.bwrap import bwrap_problem
from envhub.task import GoldCall
from envhub.trajectory import Trajectory


def _editor(command: str, path: str, **arguments: object) -> GoldCall:
    return GoldCall(
        name="str_replace_editor", arguments={"command": command, "path": path, **arguments}
    )


def _bash(command: str) -> GoldCall:
    return GoldCall(name="bash", arguments={"command": command})


#: (call, what its observation must contain); editor failures are error observations
EVERYWHERE = [
    (_editor("view", "/proc/1/mem"), "Error: FileOperationError"),  # EACCES or EIO
    (_editor("create", "/proc/envhub-evil", file_text="x"), "Error: FileOperationError"),
    (_editor("view", "no/such/module.py"), "Error: ToolError: the path"),
    (_editor("str_replace", "no/such/module.py", old_str="a", new_str="b"), "Error: ToolError"),
    (_bash("cat /no/such/file; exit 3"), "<returncode>3</returncode>"),
]
#: reading and writing the system, and attacks on the sandbox's own processes: these
#: would hit the host under ``local`` (no isolation)
ISOLATED = [
    (_editor("view", "/etc/shadow"), "Permission denied"),
    (_editor("create", "/etc/envhub-evil", file_text="pwned"), "Read-only file system"),
    (_bash("kill -TERM 1; kill -KILL -1"), "<returncode>"),
    # fork bombs, bounded by the sandbox's pids limit; their copies die with the command
    (_bash("f(){ f | f & }; f; sleep 1; echo bombed"), "<returncode>"),
    (_bash("g(){ sleep 600 & g & }; g; sleep 1; echo bombed"), "<returncode>"),
    (_bash("echo still-alive; ls -d /proc/[0-9]* | wc -l"), "still-alive"),
]


@pytest.fixture(params=["local", "bwrap", "docker"])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "docker":
        request.getfixturevalue("swe_images")  # skips (or fails in CI) without Docker
    if request.param == "bwrap" and (problem := bwrap_problem()):
        if os.environ.get("ENVHUB_REQUIRE_BWRAP") == "1":
            pytest.fail(f"bwrap required (ENVHUB_REQUIRE_BWRAP=1) but {problem}")
        pytest.skip(problem)
    return request.param


async def _replay(backend: str, task_id: str, calls: list[GoldCall]) -> Trajectory:
    env = envhub.make("swe", sandbox=backend, pool_size=0)
    task = env.tasks.get(task_id).model_copy(update={"gold_actions": calls})
    runner = EpisodeRunner(
        env, ReferencePolicy(), env_version=env.version, max_env_attempts=3,
        task_of=lambda _: task,
    )  # fmt: skip
    return await runner.run(EpisodeSpec(task_id=task_id, sample_index=0, group_id="hostile"))


async def test_hostile_actions_are_scored_never_masked(
    backend: str, ci_task_ids: list[str]
) -> None:
    script = EVERYWHERE + (ISOLATED if backend != "local" else [])
    calls = [call for call, _ in script] + [GoldCall(name="submit")]
    trajectory = await _replay(backend, ci_task_ids[0], calls)
    assert not trajectory.masked, trajectory.error
    assert trajectory.metrics.episode_attempts == 1
    assert trajectory.stop_reason == "terminal_tool" and trajectory.reward == 0.0
    observations = {m["tool_call_id"]: m["content"] for m in trajectory.messages
                    if m["role"] == "tool"}  # fmt: skip
    for turn, (call, expected) in enumerate(script):
        content = observations[f"ref-{turn}"]
        assert expected in content, (call, content)
        assert content.startswith("Error:") == (call.name == "str_replace_editor"), content
    editor_calls = sum(call.name == "str_replace_editor" for call, _ in script)
    assert trajectory.metrics.tool_errors == editor_calls
    if backend != "local":  # the bomb's copies are gone: init, keeper, this command
        assert int(observations[f"ref-{len(script) - 1}"].split()[-2]) < 10


async def test_a_repository_broken_for_grading_scores_zero(
    backend: str, ci_task_ids: list[str]
) -> None:
    """The agent's repository made unreadable for grading: the diff cannot be taken, and
    that is the agent's loss (0), not a failed sandbox."""
    calls = [_bash("chmod 000 .git && chmod 000 ."), GoldCall(name="submit")]
    trajectory = await _replay(backend, ci_task_ids[0], calls)
    assert not trajectory.masked, trajectory.error
    assert trajectory.reward == 0.0 and trajectory.metrics.episode_attempts == 1
