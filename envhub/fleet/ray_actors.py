"""The fleet's two Ray actors: the registry (:class:`RegistryTable`, where replicas are
listed) and the :class:`Replica` (one ``envhub serve`` app on one node).

Both are detached and named in the fleet's namespace, so they outlive the ``envhub fleet
up`` process and anyone can find them by name. A replica serves its app with uvicorn on a
thread of the actor's own process, on the node's address and a free port: the data plane
is plain HTTP/WebSocket to that URL, never a Ray call, and a killed actor process takes
its server with it (nothing is left listening). Ray restarts a replica that dies
(``max_restarts``); the new process reaps what dead processes left on the node, starts a
new server (a new port) and registers again under the same replica id. Ray restarts the
registry too; the replicas' periodic announcements fill it again.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import asdict, dataclass
from typing import Any

import ray

from envhub.clients.fleet import REGISTRY_NAME
from envhub.fleet.container_server import ContainerServer, serve_args

__all__ = [
    "REGISTRY_NAME",
    "RegistryActor",
    "RegistryTable",
    "Replica",
    "ReplicaActor",
    "ReplicaRecord",
    "reap_dead_sandboxes",
    "reap_node_sandboxes",
    "replica_actor_name",
]

log = logging.getLogger("envhub.fleet")

_STARTUP_TIMEOUT_S = 120.0  # a replica's app warm-up (sandbox pools, browsers) included
_ANNOUNCE_S = 5.0  # how often a replica re-announces itself (refills a restarted registry)


def replica_actor_name(replica_id: str) -> str:
    """The Ray actor name of replica ``replica_id`` (unique in the namespace)."""
    return f"envhub-replica:{replica_id}"


@dataclass(frozen=True, slots=True)
class ReplicaRecord:
    """One replica as it last registered: its server's ``url``, the Ray node and process
    it runs in, and how many times it registered (1 + the restarts Ray made)."""

    env: str
    replica_id: str
    url: str
    node_id: str
    pid: int
    registrations: int = 1


class RegistryTable:
    """The registry: ``{env: {replica_id: ReplicaRecord}}`` and a counter that moves at
    every change, so readers can tell a new list from the one they hold. Runs as the
    named actor :data:`RegistryActor` (:data:`~envhub.clients.fleet.REGISTRY_NAME`);
    replicas call :meth:`register` at every start and :meth:`announce` every few
    seconds, readers call :meth:`listing` (plain dicts).

    The table lives in the actor's memory only: a registry that Ray restarts starts
    empty and is filled again by the announcements within ``_ANNOUNCE_S``.
    """

    def __init__(self) -> None:
        self.replicas: dict[str, dict[str, ReplicaRecord]] = {}
        self.version = 0

    def register(self, env: str, replica_id: str, url: str, node_id: str, pid: int) -> int:
        """A replica (re)started: record it; returns its registrations so far."""
        known = self.replicas.setdefault(env, {}).get(replica_id)
        count = 1 if known is None else known.registrations + 1
        self.replicas[env][replica_id] = ReplicaRecord(env, replica_id, url, node_id, pid, count)
        self.version += 1
        return count

    def announce(self, record: dict[str, Any]) -> None:
        """A running replica says where it is; only news changes the table."""
        announced = ReplicaRecord(**record)
        listed = self.replicas.setdefault(announced.env, {})
        if listed.get(announced.replica_id) != announced:
            listed[announced.replica_id] = announced
            self.version += 1

    def listing(self, env: str | None = None) -> tuple[int, list[dict[str, Any]]]:
        tables = self.replicas.values() if env is None else [self.replicas.get(env, {})]
        return self.version, [asdict(r) for table in tables for r in table.values()]


RegistryActor = ray.remote(num_cpus=0)(RegistryTable)


def reap_dead_sandboxes() -> dict[str, int]:
    """What ``envhub sandbox gc`` reaps on this node, without ``--all``: sandbox
    containers and bwrap/local directories whose owner process is dead. Returns counts
    by kind; docker is skipped where no engine runs."""
    from envhub.sandboxes.docker import docker_available
    from envhub.sandboxes.gc import gc_bwrap_dirs, gc_containers, gc_local_dirs

    reaped = {"bwrap_dirs": len(gc_bwrap_dirs()), "local_dirs": len(gc_local_dirs())}
    if docker_available():
        report = gc_containers()
        reaped["containers"] = len(report.removed)
        for error in report.errors:
            log.warning("sandbox gc: %s", error)
    return reaped


# the same as a Ray task, sent to each node of a fleet after its replicas died
reap_node_sandboxes = ray.remote(num_cpus=0)(reap_dead_sandboxes)


class Replica:
    """One replica: ``envhub serve``'s app for ``env_id`` (with ``options`` and the
    ``serve`` settings of :func:`envhub.server.build_app`), served from this actor's
    process and registered with the namespace's registry as ``replica_id``.

    The constructor does everything (Ray runs it again after a restart): reap the dead
    processes' sandboxes, build the app, start the server, register. It raises when the
    app cannot be built or the server does not start, and the replica fails to start.
    With ``containers`` the server is the environment's image run on this node instead
    (:class:`~envhub.fleet.container_server.ContainerServer`: supervised, replaced and
    registered again when it dies, removed at :meth:`shutdown`).
    """

    def __init__(
        self,
        replica_id: str,
        env_id: str,
        options: dict[str, Any],
        serve: dict[str, Any],
        namespace: str,
        containers: bool = False,
    ) -> None:
        self.replica_id = replica_id
        if reaped := {kind: n for kind, n in reap_dead_sandboxes().items() if n}:
            log.warning("replica %s reaped sandboxes of dead processes: %s", replica_id, reaped)
        host = ray.util.get_node_ip_address()
        self._container: ContainerServer | None = None
        # before the server: a container's supervisor may register a replacement at once
        self.node_id = ray.get_runtime_context().get_node_id()
        self._registry = ray.get_actor(REGISTRY_NAME, namespace=namespace)
        if containers:
            self.env = env_id
            self._container = self._start_container(host, options, serve, namespace)
        else:
            self._start_server(host, env_id, options, serve)
        self.registrations = ray.get(
            self._registry.register.remote(
                self.env, replica_id, self.url, self.node_id, os.getpid()
            ),
            timeout=_STARTUP_TIMEOUT_S,
        )
        self._stopping = threading.Event()
        threading.Thread(
            target=self._announce, args=(self._registry,), name="envhub-announce", daemon=True
        ).start()

    @property
    def url(self) -> str:
        """Where the replica's API answers (a container's URL changes when it is replaced)."""
        return self._container.url if self._container is not None else self._url

    def _start_server(
        self, host: str, env_id: str, options: dict[str, Any], serve: dict[str, Any]
    ) -> None:
        """Serve the app from this process, on a thread, at a free port of ``host``."""
        from envhub._util.asgi import ServerThread
        from envhub._util.gc_tuning import gc_tuned_for_throughput
        from envhub.server import build_app, raise_open_files_limit

        app = build_app([env_id], [options], host=host, **serve)
        (self.env,) = app.state.store.envs
        raise_open_files_limit()
        max_sessions = int(serve.get("max_sessions", 4096))
        self._server = ServerThread(
            app, host=host, name=f"envhub-replica-{self.replica_id}",
            run_in=gc_tuned_for_throughput, backlog=max(2048, min(max_sessions, 65535)),
            timeout_keep_alive=30,
        ).start(_STARTUP_TIMEOUT_S)  # fmt: skip
        self._url = self._server.url

    def _start_container(
        self, host: str, options: dict[str, Any], serve: dict[str, Any], namespace: str
    ) -> ContainerServer:
        """Run the environment's image (built here first if this node lacks it),
        published on ``host``, supervised until :meth:`shutdown`."""
        from envhub.environment_images import build_env_image

        return ContainerServer(
            build_env_image(self.env), replica_id=self.replica_id, namespace=namespace,
            host=host, token=serve.get("token"), args=serve_args(options, serve),
            on_replaced=self._register_again,
        )  # fmt: skip

    def _register_again(self, url: str) -> None:
        """A replacement container serves at ``url``: register it as a restart."""
        self.registrations = ray.get(
            self._registry.register.remote(self.env, self.replica_id, url, self.node_id,
                                           os.getpid()),
            timeout=_STARTUP_TIMEOUT_S,
        )  # fmt: skip

    def _announce(self, registry: Any) -> None:
        while not self._stopping.wait(_ANNOUNCE_S):
            try:
                ray.get(registry.announce.remote(self.address()), timeout=_ANNOUNCE_S)
            except ray.exceptions.RayError as exc:  # restarting, or gone at fleet down
                log.info("replica %s could not announce itself: %s", self.replica_id, exc)

    def address(self) -> dict[str, Any]:
        """Where this replica serves and runs (a :class:`ReplicaRecord` as a dict)."""
        return asdict(
            ReplicaRecord(self.env, self.replica_id, self.url, self.node_id, os.getpid(),
                         self.registrations)
        )  # fmt: skip

    def shutdown(self, timeout_s: float) -> bool:
        """Stop the server as Ctrl-C stops ``envhub serve``: open sessions are aborted and
        the environment's shared resources freed by the app's shutdown. True when it
        finished within ``timeout_s``. A container is removed at once instead (``docker rm
        -f``, no graceful shutdown: what it ran dies with it) and this returns True."""
        self._stopping.set()
        if self._container is not None:
            self._container.stop()
            return True
        return self._server.stop(timeout_s)


ReplicaActor = ray.remote(Replica)
