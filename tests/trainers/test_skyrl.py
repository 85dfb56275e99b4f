"""The skyrl-gym text environment over envhub sessions (local and remote)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

import envhub
from envhub.errors import InvalidRequest
from tests.trainers.conftest import TRAIN_TASKS

skyrl_gym = pytest.importorskip("skyrl_gym")
from envhub.trainers.skyrl import (  # noqa: E402
    SKYRL_ENV_ID,
    EnvhubSkyRLEnv,
    close_environments,
    generator_output,
    register,
)
from tests.trainers.factories import hand_tree, two_turn  # noqa: E402


def call(name: str, **arguments: object) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


@pytest.fixture(scope="module", autouse=True)
def registered() -> Iterator[None]:
    register()
    register()  # idempotent
    yield
    close_environments()


def make(task_id: str, **config: object) -> EnvhubSkyRLEnv:
    env = skyrl_gym.make(
        SKYRL_ENV_ID, env_config={"env": "calc", **config}, extras={"task_id": task_id}
    )
    assert isinstance(env, EnvhubSkyRLEnv) and isinstance(env, skyrl_gym.Env)
    return env


def test_gold_episode_through_the_skyrl_interface(calc: envhub.LocalEnvironment) -> None:
    task = calc.tasks.get(TRAIN_TASKS[0])
    expression = task.gold_actions[0].arguments["expression"]
    env = make(task.id)
    messages, info = env.init(task.prompt)
    assert messages == task.prompt and info["task_id"] == task.id
    out = env.step(f"Let me compute.\n{call('calculate', expression=expression)}")
    assert not out["done"] and out["reward"] == 0.0
    (observation,) = out["observations"]
    assert observation["role"] == "tool" and observation["content"] == task.answer
    out = env.step(call("answer", value=task.answer))
    assert out["done"] and out["reward"] == 1.0 and out["observations"] == []
    assert out["metadata"]["stop_reason"] == "terminal_tool"
    assert env.get_metrics() == {
        "turns": 2,
        "reward": 1.0,
        "reward/correct": 1.0,
        "reward/answered": 1.0,
    }
    env.close()


def test_malformed_calls_become_observations_and_text_ends_the_episode() -> None:
    env = make(TRAIN_TASKS[1])
    env.init()
    out = env.step('<tool_call>\n{"name": "calculate", "arguments": {"expression": "1 +\n')
    assert not out["done"]
    assert out["observations"][0]["content"].startswith("Error: arguments of calculate")
    assert out["metadata"]["tool_errors"] == 1
    out = env.step("The answer is 12.")
    assert out["done"] and out["reward"] == 0.0
    assert out["metadata"]["stop_reason"] == "final_answer"


def test_envhub_budget_ends_the_episode() -> None:
    env = make(TRAIN_TASKS[0], max_turns=2)
    env.init()
    assert env.max_turns == 2
    assert not env.step(call("calculate", expression="1 + 1"))["done"]
    out = env.step(call("calculate", expression="2 + 2"))
    assert out["done"] and out["metadata"]["stop_reason"] == "max_turns"


def test_unfinished_sessions_are_freed_on_close() -> None:
    env = make(TRAIN_TASKS[0])
    env.init()
    env.close()
    assert env.session.closed and env.reward is None


def test_missing_task_id_is_a_typed_error() -> None:
    with pytest.raises(InvalidRequest, match="task_id"):
        EnvhubSkyRLEnv({"env": "calc"}, {})
    with pytest.raises(InvalidRequest, match=r"env_config\.env"):
        EnvhubSkyRLEnv({}, {"task_id": "x"})


def test_remote_sessions(calc_server: str, calc: envhub.LocalEnvironment) -> None:
    task = calc.tasks.get(TRAIN_TASKS[0])
    env = skyrl_gym.make(
        SKYRL_ENV_ID,
        env_config={"env": calc_server, "env_name": "calc"},
        extras={"task_id": task.id},
    )
    messages, _ = env.init(task.prompt)
    assert messages == task.prompt
    out = env.step(call("answer", value=task.answer))
    assert out["done"] and out["reward"] == 1.0


def test_a_pool_of_servers(calc_server: str, calc: envhub.LocalEnvironment) -> None:
    """``env`` is anything ``envhub.connect`` takes: a list of servers is a pool
    (``max_turns``, an in-process budget, is not sent as one: servers would refuse it)."""
    from envhub.clients.pooled import PooledEnvironment
    from envhub.server import create_app
    from envhub.testing import serve_in_thread

    task = calc.tasks.get(TRAIN_TASKS[1])
    with serve_in_thread(create_app(["calc"])) as second:
        env = skyrl_gym.make(
            SKYRL_ENV_ID,
            env_config={"env": [calc_server, second], "env_name": "calc", "max_turns": 4},
            extras={"task_id": task.id},
        )
        assert isinstance(env.environment, PooledEnvironment)
        env.init(task.prompt)
        out = env.step(call("answer", value=task.answer))
        assert out["done"] and out["reward"] == 1.0
        close_environments()


def test_generator_output_carries_trees() -> None:
    """Tree leaves as SkyRL GeneratorOutput fields: per-token node advantages in the
    per-token reward form, shared turns in the prompt and out of the loss mask."""
    tree = hand_tree()
    flat = generator_output(tree)
    assert flat["rewards"] == [1.0, 0.0, 1.0, 0.0] and flat["prompt_token_ids"][3] == [1, 2, 3]
    assert flat["envhub_parent_ids"] == [None, "t-0", "t-0", "t-1"]
    out = generator_output(tree, tree="treerl")
    assert out["response_ids"][0] == [10, 11, 91, 12, 13, 92, 14]
    assert out["loss_masks"][0] == [1, 1, 0, 1, 1, 0, 1]
    assert out["rewards"][0] == [0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.5]
    assert out["prompt_token_ids"][3] == [1, 2, 3, 10, 11, 91, 30, 31, 92]
    assert out["rewards"][3] == [-0.5, -0.5] and out["loss_masks"][3] == [1, 1]
    assert out["envhub_branch_turns"] == [None, 1, 2, 2]
    assert [len(lp) for lp in out["rollout_logprobs"]] == [len(r) for r in out["response_ids"]]
    # a masked leaf: SkyRL has no void reward, so its tree is left out whole with tree=
    tree[3] = tree[3].model_copy(update={"masked": True, "reward": None})
    assert generator_output(tree, tree="treerl")["envhub_trajectory_ids"] == []
    assert generator_output(tree)["envhub_trajectory_ids"] == ["t-0", "t-1", "t-2"]
    with pytest.raises(InvalidRequest, match="tree rollouts only"):
        generator_output([*hand_tree("u"), two_turn("g", 0, 1.0)], tree="treerl")
