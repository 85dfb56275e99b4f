"""The Ray fleet's control plane: ``envhub fleet up|status|down`` as functions.

:func:`fleet_up` starts the registry and the replica actors (:mod:`envhub.fleet.ray_actors`)
in a namespace, spread over the nodes; :func:`fleet_status` lists them with their health;
:func:`fleet_down` removes them and what they left. Clients reach the replicas through
:class:`envhub.clients.fleet.FleetEnvironment` (the data plane: HTTP/WebSocket to the
replicas' URLs, never a Ray call). Every wait is bounded and every failure is a
:class:`~envhub.errors.FleetError` that says what is missing.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from envhub.clients.fleet import (
    REGISTRY_NAME,
    join_cluster,
    no_fleet,
    ray_error_cause,
    registry_actor,
)
from envhub.errors import FleetError
from envhub.fleet.ray_actors import (
    RegistryActor,
    ReplicaActor,
    ReplicaRecord,
    reap_node_sandboxes,
    replica_actor_name,
)
from envhub.types import Health

__all__ = [
    "DownReport",
    "ReplicaRecord",
    "ReplicaStatus",
    "fleet_down",
    "fleet_status",
    "fleet_up",
]

DEFAULT_RESOURCES: dict[str, float] = {"num_cpus": 1}
_ACTOR_OPTIONS = frozenset({"num_cpus", "num_gpus", "memory"})  # the rest: custom resources
_HEALTH_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """A replica as ``envhub fleet status`` shows it: where the registry lists it, and
    what its ``/health`` answered just now (``health`` is ``"ok"`` or why not)."""

    env: str
    replica_id: str
    node_id: str
    url: str
    pid: int
    restarts: int
    health: str
    open_sessions: int | None = None
    capacity: int | None = None


@dataclass(slots=True)
class DownReport:
    """What :func:`fleet_down` removed: the replicas (``graceful`` those whose server
    shut down cleanly before the kill), the sandboxes reaped per node, and the registry."""

    replicas: list[str] = field(default_factory=list)
    graceful: list[str] = field(default_factory=list)
    reaped: dict[str, dict[str, int]] = field(default_factory=dict)
    registry: bool = False
    errors: list[str] = field(default_factory=list)


def _listing(registry: Any, timeout_s: float, where: str) -> list[ReplicaRecord]:
    try:
        _, rows = ray.get(registry.listing.remote(), timeout=timeout_s)
    except (RayActorError, GetTimeoutError) as exc:
        raise FleetError(f"the fleet registry of {where} does not answer: {exc}") from None
    return [ReplicaRecord(**row) for row in rows]


def _our_actors(namespace: str) -> list[str]:
    """Names of the envhub actors (registry, replicas) alive or restarting in
    ``namespace`` (Ray's GCS lists named actors until they are dead)."""
    return sorted(
        entry["name"]
        for entry in ray.util.list_named_actors(all_namespaces=True)
        if entry["namespace"] == namespace
        and (entry["name"] == REGISTRY_NAME or entry["name"].startswith(replica_actor_name("")))
    )


# -- fleet up -----------------------------------------------------------------------------


def _serve_settings() -> frozenset[str]:
    from envhub.server.app import build_app

    return frozenset(
        name for name, p in inspect.signature(build_app).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    )  # fmt: skip


def _resource_request(env_id: str, resources: dict[str, Any]) -> dict[str, float]:
    """``resources`` checked: non-negative numbers, CPUs and GPUs by their option names."""
    for name, value in resources.items():
        if name in ("CPU", "GPU"):
            raise FleetError(f"ask for {name} as num_{name.lower()}s, not {name}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise FleetError(
                f"resource {name} of a {env_id} replica must be a number >= 0, got {value!r}"
            )
    return {name: float(value) for name, value in resources.items()}


def _actor_resources(resources: dict[str, float]) -> dict[str, Any]:
    """``{"num_cpus": 1, "sandbox_slots": 1}`` -> actor options (custom ones nested)."""
    options: dict[str, Any] = {
        k: int(v) if k == "memory" else v for k, v in resources.items() if k in _ACTOR_OPTIONS
    }  # memory is in bytes
    custom = {k: float(v) for k, v in resources.items() if k not in _ACTOR_OPTIONS}
    if custom:
        options["resources"] = custom
    return options


def _as_node_resources(resources: dict[str, float]) -> dict[str, float]:
    """The same request in a node's terms (``CPU``, ``GPU``, ``memory``, custom)."""
    names = {"num_cpus": "CPU", "num_gpus": "GPU", "memory": "memory"}
    return {names.get(k, k): float(v) for k, v in resources.items() if float(v) > 0}


def _check_fits(env_id: str, resources: dict[str, float]) -> None:
    """FleetError when no alive node could ever hold one replica of ``env_id``."""
    wanted = _as_node_resources(resources)
    nodes = [node["Resources"] for node in ray.nodes() if node["Alive"]]
    if not any(all(have.get(k, 0.0) >= v for k, v in wanted.items()) for have in nodes):
        offered = sorted({k for have in nodes for k in have if not k.startswith("node:")})
        raise FleetError(
            f"no node of the cluster can hold a {env_id} replica needing {wanted} "
            f"(resources offered: {', '.join(offered)})"
        )


def _head_node_id() -> str:
    """The head node: the registry lives there, since the cluster ends with it anyway
    and any other node may go."""
    for node in ray.nodes():
        if node["Alive"] and "node:__internal_head__" in node["Resources"]:
            return str(node["NodeID"])
    raise FleetError("the Ray cluster reports no alive head node")


def fleet_up(
    address: str,
    envs: dict[str, int],
    *,
    options: dict[str, dict[str, Any]] | None = None,
    namespace: str = "envhub",
    resources: dict[str, float] | None = None,
    env_resources: dict[str, dict[str, float]] | None = None,
    serve: dict[str, Any] | None = None,
    max_restarts: int = 10,
    timeout_s: float = 180.0,
    containers: bool = False,
    insecure: bool = False,
) -> list[ReplicaRecord]:
    """Start ``envs`` (``{env id: replica count}``) as a fleet in ``namespace`` of the Ray
    cluster at ``address``, and return the replicas once every one answers ``/health``.

    The registry is a detached actor on the head node, restarted whenever it dies. Each
    replica is a detached actor placed with the ``SPREAD`` strategy and needing
    ``resources`` (default ``{"num_cpus": 1}``; Ray's ``num_cpus``/``num_gpus``/
    ``memory`` or custom resources such as ``sandbox_slots``), overridden per environment
    by ``env_resources``; it hosts its environment with ``options[env]`` and the ``serve``
    settings of :func:`envhub.server.build_app` (``max_sessions``, ``token``,
    ``max_turns``...), and Ray restarts it up to ``max_restarts`` times. With
    ``containers`` each replica runs its environment's image (``envhub image build``,
    built on the node if missing) and supervises that container instead. Raises
    :class:`FleetError`, with everything started removed again, when a fleet already
    runs in the namespace, a replica fits no node, fails to start, or is not up within
    ``timeout_s``, and before anything starts when ``serve`` has no ``token`` and
    ``insecure`` is not set: replicas bind their nodes' network addresses (Ray resolves
    a node started on 127.0.0.1 to its routable address), so an open fleet is one anyone
    who reaches a node can run episodes on, and must be asked for.
    """
    options, env_resources, serve = dict(options or {}), dict(env_resources or {}), serve or {}
    if not serve.get("token") and not insecure:
        raise FleetError(
            "refusing to start a fleet without a token: its replicas serve on their nodes' "
            "network addresses; pass serve={'token': TOKEN} so that clients must present "
            "it, or insecure=True to serve the fleet open on purpose"
        )
    if not envs or any(count < 1 for count in envs.values()):
        raise FleetError(f"a fleet needs at least one replica of each environment: {envs}")
    for what, keys in (("options", options), ("env_resources", env_resources)):
        if unknown := sorted(set(keys) - set(envs)):
            raise FleetError(f"{what} for {', '.join(unknown)}, which the fleet does not run")
    if unknown := sorted(set(serve) - _serve_settings()):
        raise FleetError(f"unknown serve settings: {', '.join(unknown)}")
    join_cluster(address, namespace)
    if _our_actors(namespace):
        raise FleetError(
            f"an envhub fleet already runs in namespace {namespace!r} at {address}; "
            "`envhub fleet down` it first or pick another --namespace"
        )
    needs = {env: _resource_request(env, {**(resources or DEFAULT_RESOURCES),
                                          **env_resources.get(env, {})})
             for env in envs}  # fmt: skip
    for env_id, wanted in needs.items():
        _check_fits(env_id, wanted)
    RegistryActor.options(
        name=REGISTRY_NAME, namespace=namespace, lifetime="detached", max_restarts=-1,
        scheduling_strategy=NodeAffinitySchedulingStrategy(_head_node_id(), soft=False),
    ).remote()  # fmt: skip
    env_of = {f"{env_id}-{i}": env_id for env_id, count in envs.items() for i in range(count)}
    handles = {
        rid: ReplicaActor.options(
            name=replica_actor_name(rid), namespace=namespace, lifetime="detached",
            max_restarts=max_restarts, scheduling_strategy="SPREAD",
            **_actor_resources(needs[env_id]),
        ).remote(rid, env_id, options.get(env_id, {}), serve, namespace, containers)
        for rid, env_id in env_of.items()
    }  # fmt: skip
    try:
        records = _await_replicas(
            handles, {rid: needs[env_id] for rid, env_id in env_of.items()}, timeout_s
        )
        _check_health(records)
    except FleetError as exc:
        try:
            fleet_down(address, namespace)
        except FleetError as cleanup:
            raise FleetError(f"{exc}; removing the half-started fleet failed: {cleanup}") from None
        raise
    return records


def _await_replicas(
    handles: dict[str, Any], needs: dict[str, dict[str, float]], timeout_s: float
) -> list[ReplicaRecord]:
    """Every replica's record once it registered, or a FleetError naming each one that
    failed (its exception) or is not up within ``timeout_s`` (what it needs, what is
    free: usually a cluster too small for the fleet)."""
    refs = {handle.address.remote(): replica_id for replica_id, handle in handles.items()}
    ready, pending = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
    records, failed = [], []
    for ref in ready:
        try:
            records.append(ReplicaRecord(**ray.get(ref)))
        except RayError as exc:
            failed.append(f"{refs[ref]} failed to start: {ray_error_cause(exc)}")
    if pending:
        free = {k: round(v, 2) for k, v in ray.available_resources().items()
                if not k.startswith("node:") and k not in ("memory", "object_store_memory")}
        failed += [f"{refs[ref]} not up within {timeout_s:g}s (it needs "
                   f"{_as_node_resources(needs[refs[ref]])}; free now: {free})"
                   for ref in pending]  # fmt: skip
    if failed:
        raise FleetError("fleet up failed: " + "; ".join(sorted(failed)))
    return sorted(records, key=lambda r: r.replica_id)


def _probe(urls: Iterable[str]) -> dict[str, Health | str]:
    """``GET /health`` of each URL at once: its answer, or why it failed."""

    def one(url: str) -> Health | str:
        try:
            answer = httpx.get(f"{url}/health", timeout=_HEALTH_TIMEOUT_S)
            answer.raise_for_status()
            return Health.model_validate_json(answer.content)
        except (httpx.HTTPError, ValueError) as exc:  # pydantic's ValidationError included
            return f"down ({type(exc).__name__}: {exc})" if str(exc) else f"down ({exc!r})"

    urls = list(urls)
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(urls)))) as pool:
        return dict(zip(urls, pool.map(one, urls), strict=True))


def _check_health(records: list[ReplicaRecord]) -> None:
    answers = _probe(r.url for r in records)
    if failed := [f"{r.replica_id} at {r.url}: {answers[r.url]}" for r in records
                  if isinstance(answers[r.url], str)]:  # fmt: skip
        raise FleetError("fleet up failed, replicas do not answer /health: " + "; ".join(failed))


# -- fleet status -------------------------------------------------------------------------


def fleet_status(
    address: str, namespace: str = "envhub", timeout_s: float = 10.0
) -> list[ReplicaStatus]:
    """Every replica the registry lists, with what its ``/health`` says right now."""
    join_cluster(address, namespace)
    records = _listing(registry_actor(namespace, address), timeout_s, f"namespace {namespace!r}")
    answers = _probe(r.url for r in records)
    statuses = []
    for r in sorted(records, key=lambda r: (r.env, r.replica_id)):
        answer = answers[r.url]
        load = None if isinstance(answer, str) else answer
        statuses.append(ReplicaStatus(
            env=r.env, replica_id=r.replica_id, node_id=r.node_id, url=r.url, pid=r.pid,
            restarts=r.registrations - 1, health=answer if isinstance(answer, str) else "ok",
            open_sessions=None if load is None else load.sessions,
            capacity=None if load is None else load.max_sessions,
        ))  # fmt: skip
    return statuses


# -- fleet down ---------------------------------------------------------------------------


def fleet_down(address: str, namespace: str = "envhub", timeout_s: float = 60.0) -> DownReport:
    """Remove the fleet of ``namespace``: each replica's server shuts down as Ctrl-C
    stops ``envhub serve`` (sessions aborted, environment resources freed), its actor is
    killed for good, each node's dead processes' sandboxes are reaped, then the registry
    goes. Raises :class:`FleetError` when there is no fleet, or when an envhub actor of
    the namespace is still alive after ``timeout_s``."""
    join_cluster(address, namespace)
    names = _our_actors(namespace)
    if not names:
        raise no_fleet(namespace, address)
    deadline = time.monotonic() + timeout_s
    report = DownReport()
    nodes: set[str] = set()
    if REGISTRY_NAME in names:
        try:
            registry = ray.get_actor(REGISTRY_NAME, namespace=namespace)
            nodes = {r.node_id for r in _listing(registry, 10.0, f"namespace {namespace!r}")}
        except (FleetError, ValueError) as exc:  # replicas still go; their nodes are unknown
            report.errors.append(str(exc))
    prefix = replica_actor_name("")
    _stop_replicas(namespace, [n for n in names if n.startswith(prefix)], timeout_s, report)
    _wait_gone(namespace, prefix, deadline)
    report.reaped = _reap_nodes(nodes, deadline, report)
    if REGISTRY_NAME in names:
        with contextlib.suppress(ValueError):  # already gone
            ray.kill(ray.get_actor(REGISTRY_NAME, namespace=namespace), no_restart=True)
            report.registry = True
    if survivors := _wait_gone(namespace, "", deadline):
        raise FleetError(
            f"fleet down left actors alive in namespace {namespace!r}: {', '.join(survivors)}"
        )
    return report


def _stop_replicas(namespace: str, names: list[str], timeout_s: float, report: DownReport) -> None:
    """Shut each running replica's server down (up to half of ``timeout_s``, 30 s at
    most), then kill every replica's actor with no restart; records both in ``report``."""
    replicas = {}
    for name in names:
        with contextlib.suppress(ValueError):  # died since it was listed
            replicas[name.removeprefix(replica_actor_name(""))] = ray.get_actor(
                name, namespace=namespace
            )
    # only replicas that answer now get a graceful stop: one still waiting for a node
    # or (re)starting would hold the call until the timeout
    pings = {handle.address.remote(): rid for rid, handle in replicas.items()}
    answered, _ = ray.wait(list(pings), num_returns=len(pings), timeout=_HEALTH_TIMEOUT_S)
    grace = max(1.0, min(30.0, timeout_s / 2))
    stops = {replicas[pings[ref]].shutdown.remote(grace): pings[ref] for ref in answered}
    ready, _ = ray.wait(list(stops), num_returns=len(stops), timeout=grace + 5.0)
    for ref in ready:
        with contextlib.suppress(RayError):  # restarting or dead: the kill below does it
            if ray.get(ref):
                report.graceful.append(stops[ref])
    for handle in replicas.values():
        ray.kill(handle, no_restart=True)
    report.replicas = sorted(replicas)
    report.graceful.sort()


def _wait_gone(namespace: str, prefix: str, deadline: float) -> list[str]:
    """Wait (until ``deadline``) for the namespace's envhub actors named ``prefix...`` to
    be dead; returns those still alive."""
    while True:
        alive = [name for name in _our_actors(namespace) if name.startswith(prefix)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.1)


def _reap_nodes(
    node_ids: set[str], deadline: float, report: DownReport
) -> dict[str, dict[str, int]]:
    """Run the sandbox gc on each alive node of ``node_ids`` (after its replicas died)."""
    alive = {node["NodeID"] for node in ray.nodes() if node["Alive"]}
    refs = {
        reap_node_sandboxes.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
        ).remote(): node_id
        for node_id in sorted(node_ids & alive)
    }
    reaped: dict[str, dict[str, int]] = {}
    ready, pending = ray.wait(
        list(refs), num_returns=len(refs), timeout=max(1.0, deadline - time.monotonic())
    )
    for ref in ready:
        try:
            reaped[refs[ref]] = ray.get(ref)
        except RayError as exc:
            report.errors.append(f"sandbox gc on node {refs[ref]}: {ray_error_cause(exc)}")
    for ref in pending:
        ray.cancel(ref, force=True)
        report.errors.append(f"sandbox gc on node {refs[ref]} did not finish in time")
    return reaped
