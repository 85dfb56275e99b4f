"""The gymnasium adapter, checked with gymnasium's own env checker.

``check_env`` cannot apply its Box/Discrete-specific checks to text spaces; it runs
the API, seeding-determinism and space-membership checks that do apply.
"""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import ClassVar

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import envhub
import envhub.errors
import envhub.gym
from tests.bridges import openenv_adder, openenv_problem, verifiers_guess, verifiers_problem

# Options that keep each shipped plugin's check to about a second; a plugin not named
# here (a new one) is checked with its defaults.
_QUICK_OPTIONS: dict[str, dict[str, object]] = {
    "reasoning_gym": {"datasets": "chain_sum", "size": 2},  # the default set loads ARC files
    "mcp": {"task_set": "time-zones"},  # git-history first builds a repository (~15 s)
    "web": {"mode": "text"},  # the shop's pages also render without JavaScript
    "swe": {"sandbox": "local"},  # gymnasium's random actions call tools with no arguments
    "openenv": openenv_adder(),  # the bridges have no default: an operator names the server
    "verifiers": verifiers_guess(),  # ... or the taskset
}
_BRIDGE_PROBLEMS = {"openenv": openenv_problem, "verifiers": verifiers_problem}


def _chromium_problem(name: str) -> str | None:
    """Why ``name`` cannot run here, for the one plugin that needs a browser."""
    if name != "miniwob":
        return None
    from envhub_web.pool import find_chromium

    if find_chromium() is not None or os.environ.get("ENVHUB_REQUIRE_CHROMIUM") == "1":
        return None
    return "miniwob needs Chromium (apt-get install -y chromium)"


@pytest.mark.parametrize("name", sorted(envhub.discover_environments()))
def test_check_env_passes_for_every_installed_plugin(name: str) -> None:
    """gymnasium's own ``check_env`` (API, seeding determinism, spaces, render, close)
    over every plugin installed beside envhub, through its registered id; the checker's
    warnings (``WARN: ...``) and any raised from envhub's own code count as failures."""
    if problem := _chromium_problem(name) or _BRIDGE_PROBLEMS.get(name, lambda: None)():
        pytest.skip(problem)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        options = _QUICK_OPTIONS.get(name, {})
        env = gymnasium.make(f"envhub/{name}-v0", render_mode="ansi", **options)
        try:
            check_env(env.unwrapped, skip_render_check=False)
        finally:
            env.close()
    ours = [w for w in caught if "WARN:" in str(w.message) or "envhub" in str(w.filename)]
    assert [f"{w.filename}: {w.message}" for w in ours] == []


def test_render_through_gymnasium_warns_nothing() -> None:
    """``gymnasium.make`` wraps the env in the passive checker, which warned on every
    ``render()`` while the metadata declared no ``render_fps``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gymnasium.make("envhub/calc-v0", render_mode="ansi")
        env.reset(seed=0, options={"task_id": "calc-0-00001"})
        env.step("12")
        assert "[assistant] 12" in env.render()
        env.close()
    assert [str(w.message) for w in caught] == []
    assert env.metadata["render_fps"] > 0


def test_episode_through_gymnasium() -> None:
    env = gymnasium.make("envhub/calc-v0", render_mode="ansi")
    obs, info = env.reset(seed=0, options={"task_id": "calc-0-00001"})
    assert json.loads(obs)[-1]["role"] == "user" and info["task_id"] == "calc-0-00001"
    task = envhub.make("calc").tasks.get("calc-0-00001")
    expression = task.gold_actions[0].arguments["expression"]
    action = {
        "tool_calls": [
            {"id": "1", "name": "calculate", "arguments": json.dumps({"expression": expression})}
        ]
    }
    obs, reward, terminated, truncated, _ = env.step(json.dumps(action))
    assert json.loads(obs)[0]["content"] and reward == 0.0 and not terminated
    bad = env.step('{"tool_calls": [{"id": "2", "name": "calculate", "arguments": "{oops"}]}')
    assert bad[4]["is_error"] == [True] and not bad[2]
    answer = {
        "tool_calls": [
            {"id": "3", "name": "answer", "arguments": json.dumps({"value": task.answer})}
        ]
    }
    _, reward, terminated, truncated, info = env.step(json.dumps(answer))
    assert reward == 1.0 and terminated and not truncated and info["components"]["correct"] == 1.0
    assert "[assistant]" in env.render()
    env.close()


def test_plain_text_action_is_a_final_answer() -> None:
    env = gymnasium.make("envhub.gym:envhub/calc-v0")
    env.reset(seed=3)
    _, reward, terminated, truncated, info = env.step("I think it is 12")
    assert terminated and not truncated and info["stop_reason"] == "final_answer" and reward == 0.0


LEGACY_GYMNASIUM = Path(sys.prefix) / "gymnasium-0.29"  # .ci/gym_plugin_setup.sh puts it there


def test_ids_need_no_import_where_gymnasium_loads_plugins(tmp_path: Path) -> None:
    """The ``gymnasium.envs`` entry point, run by the gymnasium that reads it (0.26-0.29;
    1.x dropped plugin loading), registers the ids on ``import gymnasium`` from metadata
    alone: no environment and not the adapter is imported until ``make``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if not hasattr(gymnasium.envs.registration, "load_plugin_envs"):
        if not LEGACY_GYMNASIUM.is_dir():
            if os.environ.get("ENVHUB_REQUIRE_GYM_PLUGINS") == "1":
                pytest.fail(f"{LEGACY_GYMNASIUM} is missing: run .ci/gym_plugin_setup.sh")
            pytest.skip("needs gymnasium < 1.0 (.ci/gym_plugin_setup.sh installs 0.29)")
        env["PYTHONPATH"] = str(LEGACY_GYMNASIUM)
    code = (
        "import json, sys, gymnasium\n"
        "assert hasattr(gymnasium.envs.registration, 'load_plugin_envs'), gymnasium.__version__\n"
        "lazy = [m for m in ('envhub.gym', 'envhub_calc', 'envhub_sql') if m in sys.modules]\n"
        "assert not lazy, lazy\n"
        "env = gymnasium.make('envhub/calc-v0')\n"
        "obs, info = env.reset(seed=0, options={'task_id': 'calc-0-00001'})\n"
        "print(info['task_id'], json.loads(obs)[-1]['role'])\n"
        "print(gymnasium.make('envhub.gym:envhub/calc-v0').reset(seed=0)[1]['task_id'][:5])\n"
    )
    out = subprocess.run(  # cwd: not the checkout, whose envhub.egg-info has entry points too
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["calc-0-00001", "user", "calc-"]


def test_gymnasium_1_needs_the_module_prefix(tmp_path: Path) -> None:
    """What docs/gymnasium.md tells gymnasium 1.x users: the plain id is unknown in a fresh
    interpreter (1.0 dropped plugin loading), the ``envhub.gym:`` prefixed one works."""
    if hasattr(gymnasium.envs.registration, "load_plugin_envs"):
        pytest.skip(f"gymnasium {gymnasium.__version__} loads plugins")
    code = (
        "import gymnasium\n"
        "try:\n"
        "    gymnasium.make('envhub/calc-v0')\n"
        "except gymnasium.error.NamespaceNotFound as exc:\n"
        "    print(type(exc).__name__)\n"
        "env = gymnasium.make('envhub.gym:envhub/calc-v0')\n"
        "print(env.reset(seed=0, options={'task_id': 'calc-0-00001'})[1]['task_id'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["NamespaceNotFound", "calc-0-00001"]


@pytest.mark.parametrize(
    ("action", "reason"),
    [
        ('{"tool_calls": [{"id": "1", "name": "calculate"}, 5]}', "tool_calls.1"),
        ('{"tool_calls": [{"id": "1", "arguments": "{}"}]}', "name"),
        ('{"tool_calls": "calculate"}', "tool_calls"),
        ('{"answer": "12"}', "answer"),
        ('{"content": 12}', "content"),
    ],
)
def test_malformed_action_is_reported_not_dropped(action: str, reason: str) -> None:
    """A JSON object that is not an assistant message runs nothing: the agent reads an
    error observation naming the problem, ``info`` flags it, and the episode goes on."""
    env = gymnasium.make("envhub/calc-v0").unwrapped
    env.reset(seed=0, options={"task_id": "calc-0-00001"})
    obs, reward, terminated, truncated, info = env.step(action)
    (message,) = json.loads(obs)
    assert message["role"] == "tool" and message["content"].startswith("Error: malformed action")
    assert reason in info["malformed_action"] and reason in message["content"]
    assert info["is_error"] == [True] and reward == 0.0 and not terminated and not truncated
    task = envhub.make("calc").tasks.get("calc-0-00001")
    answer = {"role": "assistant", "tool_calls": [
        {"id": "a", "type": "function",
         "function": {"name": "answer", "arguments": json.dumps({"value": task.answer})}}
    ]}
    _, reward, terminated, _, info = env.step(json.dumps(answer))
    assert reward == 1.0 and terminated and info["metrics"]["turns"] == 1  # none for the bad one
    env.close()


class PooledGymEnv(envhub.Environment):
    """Keeps a process-wide resource, released by ``aclose_shared``."""

    released: ClassVar[int] = 0

    @envhub.tool
    def noop(self) -> str:
        """Do nothing."""
        return "ok"

    def reward(self) -> float:
        return 0.0

    @classmethod
    async def aclose_shared(cls) -> None:
        cls.released += 1


def test_close_releases_the_shared_resources() -> None:
    """Without exit hooks, a gymnasium user's ``close()`` is what frees sandbox pools and
    browsers of the environment class."""
    env = envhub.gym.EnvhubGymEnv(f"{__name__}:PooledGymEnv")
    env.reset(seed=0)
    before = PooledGymEnv.released
    env.close()
    assert PooledGymEnv.released == before + 1


def test_closing_one_of_two_clients_leaves_the_shared_resources_to_the_other() -> None:
    """A class's shared resources belong to every open client of it: closing the second
    of two gymnasium environments (as ``check_env`` does) must not end the first's
    episodes; closing the last one frees them, and a client dropped unclosed does not
    hold them."""
    first = envhub.gym.EnvhubGymEnv(f"{__name__}:PooledGymEnv")
    second = envhub.gym.EnvhubGymEnv(f"{__name__}:PooledGymEnv")
    first.reset(seed=0)
    before = PooledGymEnv.released
    second.close()
    assert PooledGymEnv.released == before
    first.step(json.dumps({"role": "assistant", "content": None, "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "noop", "arguments": "{}"}}]}))
    dropped = envhub.gym.EnvhubGymEnv(f"{__name__}:PooledGymEnv")
    del dropped
    first.close()
    assert PooledGymEnv.released == before + 1
