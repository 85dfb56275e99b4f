"""The openai policy against the scripted server: token ids, retries, faults, balancing."""

from __future__ import annotations

import asyncio
from collections import deque

from envhub.clients.local import LocalEnvironment
from envhub.policies import RetryPolicy
from tests.rollout.helpers import eventually, openai_policy, run_episodes
from tests.rollout.scripted_server import ScriptConfig, tokenize


async def test_three_turn_episode_is_recorded_exactly(scripted, calc: LocalEnvironment) -> None:
    server = scripted(ScriptConfig(token_ids=True))
    [trajectory] = await run_episodes(
        calc, openai_policy(server.base_url), (await calc.task_ids("test"))[:1]
    )
    assert not trajectory.masked and trajectory.stop_reason == "terminal_tool"
    roles = [m["role"] for m in trajectory.messages]
    assert roles == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    assert trajectory.messages[3]["content"] == "5"  # calculate("2 + 3") really ran
    assert [t.message_index for t in trajectory.turns] == [2, 4, 6]
    assert trajectory.metrics.turns == 3 and trajectory.metrics.tool_calls == 3
    assert trajectory.usage.completion_tokens == 21
    # token data exactly as the server returned it
    first = trajectory.turns[0]
    assert first.prompt_token_ids == [t for m in trajectory.messages[:2] for t in tokenize(m)]
    assert first.completion_token_ids == tokenize(trajectory.messages[2])
    assert first.completion_logprobs == [
        -(i % 7) / 10 for i in range(len(first.completion_token_ids))
    ]
    assert [t.prefix_ok for t in trajectory.turns] == [None, True, True]
    assert trajectory.reward == 0.0 and trajectory.reward_components["answered"] == 1.0


async def test_prefix_break_is_flagged(scripted, calc: LocalEnvironment) -> None:
    server = scripted(ScriptConfig(token_ids=True, break_prefix_at_turn=2))
    [trajectory] = await run_episodes(
        calc, openai_policy(server.base_url), (await calc.task_ids("test"))[:1]
    )
    assert [t.prefix_ok for t in trajectory.turns] == [None, True, False]


async def test_servers_without_token_ids_degrade(scripted, calc: LocalEnvironment) -> None:
    plain = scripted(ScriptConfig(token_ids=False))
    [trajectory] = await run_episodes(
        calc, openai_policy(plain.base_url), (await calc.task_ids("test"))[:1]
    )
    assert all(t.prompt_token_ids is None and t.prefix_ok is None for t in trajectory.turns)

    strict = scripted(ScriptConfig(reject_token_fields=True))
    policy = openai_policy(strict.base_url)
    task_ids = (await calc.task_ids("test"))[:3]
    trajectories = await run_episodes(calc, policy, task_ids, concurrency=1)
    assert all(not t.masked and t.stop_reason == "terminal_tool" for t in trajectories)
    assert policy.token_ids == "off"
    assert strict.stats.token_fields_requested == 1  # asked once, then never again


async def test_transient_errors_are_retried(scripted, calc: LocalEnvironment) -> None:
    server = scripted(ScriptConfig(faults=deque(["500", "429", "500"]), hang_s=5))
    [trajectory] = await run_episodes(
        calc, openai_policy(server.base_url), (await calc.task_ids("test"))[:1]
    )
    assert not trajectory.masked and trajectory.stop_reason == "terminal_tool"
    assert server.stats.faults == {"500": 2, "429": 1}
    assert server.stats.requests == 6


async def test_hang_times_out_and_is_retried(scripted, calc: LocalEnvironment) -> None:
    server = scripted(ScriptConfig(faults=deque(["hang"]), hang_s=5))
    policy = openai_policy(server.base_url, request_timeout_s=0.3)
    [trajectory] = await run_episodes(calc, policy, (await calc.task_ids("test"))[:1])
    assert not trajectory.masked and len(trajectory.turns) == 3
    assert server.stats.faults == {"hang": 1}


async def test_exhausted_retries_mask_the_episode(scripted, calc: LocalEnvironment) -> None:
    server = scripted(ScriptConfig(faults=deque(["500"] * 10)))
    [trajectory] = await run_episodes(
        calc, openai_policy(server.base_url), (await calc.task_ids("test"))[:1]
    )
    assert trajectory.masked and trajectory.reward is None
    assert trajectory.stop_reason == "model_error"
    assert trajectory.error is not None and trajectory.error.kind == "policy_transient"
    assert "HTTP 500" in trajectory.error.message


async def test_outgrowing_the_context_ends_the_episode_scored(
    scripted, calc: LocalEnvironment
) -> None:
    server = scripted(ScriptConfig(faults=deque(["", "context"])))
    [trajectory] = await run_episodes(
        calc, openai_policy(server.base_url), (await calc.task_ids("test"))[:1]
    )
    assert not trajectory.masked and trajectory.stop_reason == "context_length"
    assert trajectory.reward == 0.0 and len(trajectory.turns) == 1  # closed and scored
    assert server.stats.requests == 2  # not retried: a longer prompt will not fit either


async def test_a_first_prompt_that_does_not_fit_is_masked(
    scripted, calc: LocalEnvironment
) -> None:
    server = scripted(ScriptConfig(faults=deque(["context"])))
    [trajectory] = await run_episodes(
        calc, openai_policy(server.base_url), (await calc.task_ids("test"))[:1]
    )
    assert trajectory.masked and trajectory.reward is None
    assert trajectory.stop_reason == "model_error"
    assert trajectory.error is not None and trajectory.error.kind == "context_length"
    assert "maximum context length" in trajectory.error.message


async def test_malformed_tool_call_becomes_an_error_observation(
    scripted, calc: LocalEnvironment
) -> None:
    server = scripted(ScriptConfig(faults=deque(["malformed"])))
    [trajectory] = await run_episodes(
        calc, openai_policy(server.base_url), (await calc.task_ids("test"))[:1]
    )
    assert not trajectory.masked
    call = trajectory.messages[2]["tool_calls"][0]
    assert call["function"]["arguments"] == '{"expression": "2 +'  # kept verbatim
    assert trajectory.messages[3]["content"].startswith(
        "Error: arguments of calculate are not valid JSON"
    )
    assert trajectory.metrics.tool_errors == 1
    assert trajectory.metrics.errors_by_kind == {"invalid_arguments": 1}
    assert trajectory.stop_reason == "terminal_tool"


async def test_endpoint_concurrency_cap(scripted, calc: LocalEnvironment) -> None:
    server = scripted(ScriptConfig(latency_s=0.02))
    policy = openai_policy(server.base_url, endpoint_concurrency=2)
    task_ids = (await calc.task_ids("test"))[:8]
    trajectories = await run_episodes(calc, policy, task_ids, concurrency=8)
    assert len(trajectories) == 8 and not any(t.masked for t in trajectories)
    assert server.stats.max_inflight == 2


async def test_balancing_survives_a_dying_server_and_reprobes(
    scripted, calc: LocalEnvironment
) -> None:
    first = scripted(ScriptConfig(latency_s=0.02))
    second = scripted(ScriptConfig(latency_s=0.02))
    policy = openai_policy(first.base_url, second.base_url, eject_after=2, probe_interval_s=0.1)
    task_ids = (await calc.task_ids(None))[:150]
    run = asyncio.create_task(run_episodes(calc, policy, task_ids, concurrency=8))
    await eventually(lambda: first.stats.requests + second.stats.requests >= 30)
    # least outstanding requests spreads the load over both
    assert first.stats.requests > 5 and second.stats.requests > 5
    second.stop()
    dead = policy.pool.endpoints[1]
    await eventually(lambda: dead.ejected)
    served_while_dead = first.stats.requests
    revived = scripted(ScriptConfig(latency_s=0.02), port=second.port)
    await eventually(lambda: not dead.ejected or run.done())
    assert not dead.ejected, "the probe did not restore the endpoint before the run ended"
    trajectories = await run
    assert len(trajectories) == 150
    assert not any(t.masked for t in trajectories), [t.error for t in trajectories if t.masked]
    assert {(t.task_id, t.sample_index) for t in trajectories} == {(i, 0) for i in task_ids}
    assert first.stats.requests > served_while_dead
    assert revived.stats.requests > 0  # the probe brought the endpoint back


async def test_a_lone_endpoint_is_retried_not_ejected(scripted, calc: LocalEnvironment) -> None:
    """A model server that is still starting: connection refused, then answers."""
    placeholder = scripted()
    port = placeholder.port
    placeholder.stop()  # the port is known and nothing listens on it
    retry = RetryPolicy(max_attempts=10, base_delay_s=0.05, max_delay_s=0.4)
    policy = openai_policy(f"http://127.0.0.1:{port}/v1", retry=retry, eject_after=1)
    run = asyncio.create_task(run_episodes(calc, policy, (await calc.task_ids("test"))[:2]))
    await asyncio.sleep(0.3)
    assert not policy.pool.endpoints[0].ejected
    server = scripted(port=port)
    trajectories = await run
    assert all(not t.masked for t in trajectories) and server.stats.requests == 6
