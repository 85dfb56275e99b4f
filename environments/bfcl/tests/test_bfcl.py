"""The bfcl environment: every shipped task passes the contract check, BFCL's rules on
irrelevance, multi-turn mechanics (scripted user, a held-out function joining later), and
bad input (unknown categories, backends that raise, wrong types, hostile call text)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from envhub_bfcl import CATEGORIES
from envhub_bfcl.categories import LEFT_OUT, entries

import envhub
from envhub import GoldCall
from envhub.errors import InvalidRequest
from envhub.policies.reference import NoopPolicy
from envhub.rollout.episode import EpisodeRunner, EpisodeSpec
from envhub.testing import call_tool, check_environment, replay_calls


@pytest.mark.slow
def test_every_shipped_task_passes_the_check() -> None:
    """Gold replays score 1, a no-op 0, except irrelevance, where answering without a
    call is BFCL's right answer and the no-op scores 1 (the check reads that from the
    task's ``expected_noop_reward``)."""
    report = check_environment("bfcl", concurrency=64)
    shipped = sum(len(entries(c)) for c in CATEGORIES) - len(LEFT_OUT)
    assert report.checked == shipped > 4000


@pytest.mark.parametrize("category", ["irrelevance", "live_irrelevance"])
async def test_irrelevance_no_op_is_right_and_a_call_is_wrong(category: str) -> None:
    env = envhub.make("bfcl", categories=category)
    task = next(iter(env.tasks))
    assert task.metadata["expected_noop_reward"] == 1.0 and not task.gold_actions
    noop = await EpisodeRunner(env, NoopPolicy(), env_version="t").run(
        EpisodeSpec(task_id=task.id, sample_index=0, group_id="g")
    )
    assert noop.reward == 1.0
    session = await env.open(task.id)
    start = await session.reset()
    name = start.tools[0]["function"]["name"] if start.tools else "anything"
    await session.step([{"id": "1", "name": name, "arguments": "{}"}])
    closed = await session.close()
    assert closed.reward == 0.0
    assert closed.info["error_type"] == "irrelevance_error:decoder_success"


async def test_unknown_category_is_a_clear_error() -> None:
    with pytest.raises(InvalidRequest, match=r"unknown BFCL category 'simpel'.*simple"):
        envhub.make("bfcl", categories="simple,simpel").tasks  # noqa: B018


def test_short_and_bfcl_names_select_the_same_tasks() -> None:
    short = envhub.make("bfcl", categories="base,simple")
    bfcl = envhub.make("bfcl", categories="multi_turn_base,simple_python")
    ids = [t.id for t in short.tasks]
    assert ids == [t.id for t in bfcl.tasks] and len(ids) == 200 + 400
    assert ids[0] == "multi_turn_base_0" and "simple_python_399" in ids


async def test_a_held_out_function_joins_at_bfcls_turn_only() -> None:
    env = envhub.make("bfcl", categories="miss_func")
    task = env.tasks.get("multi_turn_miss_func_0")
    held_out_turn = 3
    missed = entries("multi_turn_miss_func")[task.id]["missed_function"]
    [held_out] = [d["name"] for d in missed[str(held_out_turn)]]
    trajectory = await replay_calls(env, task.id, task.gold_actions)
    assert trajectory.reward == 1.0 and trajectory.stop_reason == "final_answer"
    users = [i for i, m in enumerate(trajectory.messages) if m["role"] == "user"]
    assert len(users) == len(entries("multi_turn_miss_func")[task.id]["question"])
    tools_by_turn = trajectory.turn_tools()
    names_by_turn = [{t["function"]["name"] for t in tools} for tools in tools_by_turn]
    added_at = users[held_out_turn]
    for turn, names in zip(trajectory.turns, names_by_turn, strict=True):
        assert (held_out in names) == (turn.message_index > added_at)
    assert "I have updated some more functions" in trajectory.messages[added_at]["content"]


async def test_calling_a_held_out_function_early_is_refused_but_scored_as_bfcl_does() -> None:
    """BFCL's ground truth of miss_func_49 calls ``tail`` two turns before BFCL gives it:
    the session refuses the call (the model never saw the tool), and the verdict, as
    BFCL's, still executes it (BFCL's backends keep every method)."""
    env = envhub.make("bfcl", categories="miss_func")
    task = env.tasks.get("multi_turn_miss_func_49")
    trajectory = await replay_calls(env, task.id, task.gold_actions)
    refused = [m for m in trajectory.messages if "unknown tool 'tail'" in str(m.get("content"))]
    assert len(refused) == 1 and trajectory.metrics.tool_errors == 1
    assert trajectory.reward == 1.0


async def test_backend_errors_and_wrong_types_are_error_observations() -> None:
    env = envhub.make("bfcl", categories="base")
    session = await env.open("multi_turn_base_0")
    tools = {t["function"]["name"] for t in (await session.reset()).tools}
    assert {"cd", "mv", "ls"} <= tools
    wrong_type = await call_tool(session, "cd", folder=["document"])
    missing = await call_tool(session, "mv", source="final_report.pdf")
    unexpected = await call_tool(session, "ls", a=True, colour="red")
    for result in (wrong_type, missing, unexpected):
        [observation] = result.observations
        assert observation.is_error, observation
    ok = await call_tool(session, "ls", a=True)
    assert not ok.observations[0].is_error and "document" in ok.observations[0].content
    closed = await session.close()
    assert closed.reward == 0.0 and closed.info["error_type"].startswith("multi_turn:")


async def test_hostile_call_text_is_never_executed(tmp_path: Path) -> None:
    """BFCL's decoder pastes names and keywords into code it evaluates; envhub's verdict
    replaces a call it could not name safely by one that fails, as BFCL's would."""
    marker = tmp_path / "pwned"
    payload = f"__import__('os').system('touch {marker}')"
    env = envhub.make("bfcl", categories="base")
    task = env.tasks.get("multi_turn_base_0")
    calls = [
        GoldCall(name=f"ls(a=True) or {payload} or print", arguments={}),
        GoldCall(name="ls", arguments={f"a=True,x={payload},b": 1}),
        GoldCall(name="", arguments={"content": ""}),
    ]
    trajectory = await replay_calls(env, task.id, calls, max_env_attempts=1)
    assert not trajectory.masked and trajectory.reward == 0.0
    assert not marker.exists()


async def test_single_turn_calls_are_recorded_not_run_and_scored_by_the_ast_checker() -> None:
    env = envhub.make("bfcl", categories="simple")
    session = await env.open("simple_python_0")
    start = await session.reset()
    assert [t["function"]["name"] for t in start.tools] == ["calculate_triangle_area"]
    result = await session.step(
        [{"id": "1", "name": "calculate_triangle_area", "arguments": json.dumps({"base": 10})}]
    )
    assert "recorded" in result.observations[0].content and not result.done
    done = await session.step([], content="The area is 25.")
    assert done.done and done.reward == 0.0
    closed = await session.close()
    assert closed.info["error_type"] == "simple_function_checker:missing_required"
    assert "height" in closed.info["error_message"]


async def test_the_same_entry_scores_independently_in_many_episodes() -> None:
    """BFCL's checker keeps backend state in globals by model and entry; envhub's verdicts
    use a fresh name each, so repeated samples of one entry never share state."""
    env = envhub.make("bfcl", categories="base")
    task = env.tasks.get("multi_turn_base_3")
    for _ in range(3):
        assert (await replay_calls(env, task.id, task.gold_actions)).reward == 1.0


async def test_arguments_that_would_never_finish_are_refused_live_and_in_the_verdict() -> None:
    """Precisions and decimal places of a hundred million digits, an integer power with a
    huge exponent or result, an exchange of a value BFCL would repeat a hundred times:
    each would hang or exhaust the backend (and BFCL's own evaluation). An error
    observation, and the verdict treats the call as one that failed."""
    env = envhub.make("bfcl", categories="base")
    task = env.tasks.get("multi_turn_base_157")  # MathAPI and TravelAPI
    exchange = {"base_currency": "USD", "target_currency": "JPY", "value": [0] * 100_000}
    hostile = [
        GoldCall(name="power", arguments={"base": 10, "exponent": 10**12}),
        GoldCall(name="power", arguments={"base": 10**300, "exponent": 10_000}),
        GoldCall(name="logarithm", arguments={"value": 2, "base": 3, "precision": 10**8}),
        GoldCall(name="square_root", arguments={"number": 2, "precision": 10**8}),
        GoldCall(name="round_number", arguments={"number": 5, "decimal_places": -(10**8)}),
        GoldCall(name="compute_exchange_rate", arguments=exchange),
    ]
    trajectory = await replay_calls(
        env, task.id, [*hostile, *task.gold_actions], max_env_attempts=1
    )
    tools = [m["content"] for m in trajectory.messages if m["role"] == "tool"]
    refused = tools[: len(hostile)]
    assert all("out of range" in c for c in refused), refused
    assert not trajectory.masked and trajectory.reward == 1.0


async def test_episodes_never_change_the_task_or_later_episodes() -> None:
    """BFCL's TwitterAPI keeps the mentions list a tweet is posted with, and ``mention``
    extends it in place: the backends get copies of the arguments, so a task's gold
    actions (which the reference policy sends as they are) and the next episode's
    starting state stay as they were."""
    env = envhub.make("bfcl", categories="base")
    task = env.tasks.get("multi_turn_base_90")
    gold = [g.model_dump() for g in task.gold_actions]
    mention = GoldCall(name="mention", arguments={"tweet_id": 10, "mentioned_usernames": ["@x"]})
    calls = [*task.gold_actions[:-1], mention, task.gold_actions[-1]]
    assert (await replay_calls(env, task.id, calls)).reward == 0.0
    assert [g.model_dump() for g in task.gold_actions] == gold
    assert (await replay_calls(env, task.id, task.gold_actions)).reward == 1.0
