"""Episode- and group-sticky routing (issue 19): four scripted servers that model a prefix
cache, multi-turn calc episodes through ``envhub.rollout.run``."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterator

import pytest

import envhub
from envhub.clients.local import LocalEnvironment
from envhub.errors import InvalidRequest
from envhub.policies.endpoints import EndpointPool
from envhub.trajectory import Trajectory
from tests.rollout.helpers import eventually, openai_policy
from tests.rollout.scripted_server import PrefixCache, ScriptConfig, ScriptedServer

LATENCY = 0.01  # seconds per request: enough for least-outstanding to spread the load


def _cached_server(latency_s: float = LATENCY) -> ScriptedServer:
    config = ScriptConfig(latency_s=latency_s, prefix_cache=PrefixCache(us_per_token=2.0))
    return ScriptedServer(config)


@pytest.fixture(scope="module")
def fleet() -> Iterator[list[ScriptedServer]]:
    servers = [_cached_server().start() for _ in range(4)]
    yield servers
    for server in servers:
        server.stop()


def _clear(fleet: list[ScriptedServer]) -> None:
    for server in fleet:
        assert server.config.prefix_cache is not None
        server.config.prefix_cache.clear()
        server.stats.sessions.clear()


def _hit_rate(fleet: list[ScriptedServer]) -> float:
    caches = [s.config.prefix_cache for s in fleet if s.config.prefix_cache is not None]
    return sum(c.cached_tokens for c in caches) / sum(c.prompt_tokens for c in caches)


async def _rollout(
    fleet: list[ScriptedServer], env: LocalEnvironment, routing: str, group_size: int = 1
) -> list[Trajectory]:
    _clear(fleet)
    policy = openai_policy(*(s.base_url for s in fleet), routing=routing)
    try:
        result = await envhub.rollout.run(
            env, policy, "0:24", group_size=group_size, concurrency=32
        )
    finally:
        await policy.aclose()
    assert result.trajectories is not None
    assert all(not t.masked and len(t.turns) == 3 for t in result.trajectories)
    return result.trajectories


async def test_episode_routing_keeps_episodes_on_one_server_and_hits_the_cache(
    fleet: list[ScriptedServer], calc: LocalEnvironment
) -> None:
    await _rollout(fleet, calc, "least-outstanding")
    balanced = _hit_rate(fleet)
    trajectories = await _rollout(fleet, calc, "episode")
    sticky = _hit_rate(fleet)
    print(f"prefix-cache hit rate: least-outstanding {balanced:.1%}, episode-sticky {sticky:.1%}")
    assert sticky > balanced

    by_url = {server.base_url: server for server in fleet}
    for trajectory in trajectories:
        (endpoint,) = {turn.endpoint for turn in trajectory.turns}  # every turn on one server
        assert endpoint is not None
        # the server saw the episode's id in X-Session-ID on every turn, and no other did
        served = {url: s.stats.sessions[trajectory.trajectory_id] for url, s in by_url.items()}
        assert served == {url: 3 if url == endpoint else 0 for url in by_url}
    assert len({t.turns[0].endpoint for t in trajectories}) == 4  # the keys spread


async def test_group_routing_keeps_a_group_on_one_server(
    fleet: list[ScriptedServer], calc: LocalEnvironment
) -> None:
    trajectories = await _rollout(fleet, calc, "group", group_size=4)
    endpoints: dict[str, set[str | None]] = defaultdict(set)
    for trajectory in trajectories:
        endpoints[trajectory.group_id].update(turn.endpoint for turn in trajectory.turns)
    assert all(len(urls) == 1 for urls in endpoints.values())
    sessions = {key for server in fleet for key in server.stats.sessions}
    assert sessions == set(endpoints)  # the header carried the group id


async def test_an_ejected_server_moves_its_episodes_and_the_trajectory_says_so(
    calc: LocalEnvironment,
) -> None:
    # the victim is slow, so that its episodes are between turns when it stops (uvicorn
    # notices a stop within 0.1 s and finishes the requests in flight)
    servers = [_cached_server(latency_s=0.2 if i == 0 else LATENCY).start() for i in range(4)]
    victim = servers[0]
    policy = openai_policy(
        *(s.base_url for s in servers), routing="episode", eject_after=1, probe_interval_s=0.05
    )
    try:
        run = asyncio.create_task(envhub.rollout.run(calc, policy, "0:32", concurrency=32))
        await eventually(lambda: victim.stats.requests > victim.stats.inflight)  # a turn done
        await asyncio.to_thread(victim.stop)
        result = await run
    finally:
        await policy.aclose()
        for server in servers:
            server.stop()
    assert result.trajectories is not None and not any(t.masked for t in result.trajectories)
    moved = [t for t in result.trajectories if t.turns[0].endpoint == victim.base_url
             and t.turns[-1].endpoint != victim.base_url]  # fmt: skip
    assert moved, "no episode was on the stopped server between turns"
    for trajectory in moved:
        assert len(trajectory.turns) == 3
        later = [t.endpoint for t in trajectory.turns if t.endpoint != victim.base_url]
        assert len(set(later)) == 1  # it moved once, to one server, and stayed there
    assert policy.pool.endpoints[0].ejected


async def test_rendezvous_moves_only_an_ejected_endpoints_keys_and_moves_them_back() -> None:
    healthy = {"http://a/v1": True, "http://b/v1": True, "http://c/v1": True}

    async def probe(url: str) -> bool:
        return healthy[url]

    pool = EndpointPool(list(healthy), probe, eject_after=1, probe_interval_s=0.01,
                        routing="episode", sticky_max_outstanding=2)  # fmt: skip

    async def place(key: str) -> str:
        endpoint = await pool.acquire(key)
        pool.release(endpoint, connection_failed=False)
        return endpoint.url

    keys = [f"episode-{i}" for i in range(60)]
    home = {key: await place(key) for key in keys}
    assert set(home.values()) == set(healthy)
    assert {key: await place(key) for key in keys} == home  # stable

    lost = pool.endpoints[0]
    healthy[lost.url] = False
    pool.release(await pool.acquire(), connection_failed=True)  # no key, all idle: the first
    assert lost.ejected
    moved = {key: await place(key) for key in keys}
    assert all(moved[k] == home[k] for k in keys if home[k] != lost.url)  # only its keys move
    assert all(moved[k] != lost.url for k in keys)
    assert {key: await place(key) for key in keys} == moved  # and stay where they went

    healthy[lost.url] = True
    await eventually(lambda: not lost.ejected)
    assert {key: await place(key) for key in keys} == home  # back when healthy again

    # a key's server with sticky_max_outstanding requests in flight: least-outstanding
    key = keys[0]
    held = [await pool.acquire(key), await pool.acquire(key)]
    assert {e.url for e in held} == {home[key]}
    spilled = await pool.acquire(key)
    assert spilled.url != home[key]
    # without a key, or in least-outstanding mode, the key is not used
    least = EndpointPool(list(healthy), probe)
    assert {(await least.acquire(key)).url for _ in range(3)} == set(healthy)
    await pool.aclose()


def test_unknown_routing_and_bad_bound_are_refused() -> None:
    async def probe(url: str) -> bool:
        return True

    with pytest.raises(InvalidRequest, match="least-outstanding, episode, group"):
        EndpointPool(["http://a/v1"], probe, routing="sticky")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="sticky_max_outstanding"):
        EndpointPool(["http://a/v1"], probe, routing="episode", sticky_max_outstanding=0)
