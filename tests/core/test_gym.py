"""The gymnasium adapter, checked with gymnasium's own env checker.

``check_env`` cannot apply its Box/Discrete-specific checks to text spaces; it runs
the API, seeding-determinism and space-membership checks that do apply.
"""

import json
import warnings

import gymnasium
from gymnasium.utils.env_checker import check_env

import envhub
import envhub.gym


def test_check_env_passes() -> None:
    env = gymnasium.make("envhub/calc-v0").unwrapped
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=False)
    assert not [w for w in caught if "envhub" in str(w.filename)]
    env.close()


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
