"""The Ray fleet's data-plane client: :class:`FleetEnvironment`, the pool over one
environment's replicas, fed by :class:`RayReplicas` (the fleet registry's listing).

Ray is the fleet's control plane only (:mod:`envhub.fleet.control` starts, lists and
removes replicas); a client joins the cluster (:func:`join_cluster`) to read the
registry, and every session call goes to a replica's URL over HTTP/WebSocket, as with
a static pool. Every wait is bounded and every failure is a
:class:`~envhub.errors.FleetError` that says what is missing. Needs ``pip install
'envhub-rl[ray]'``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

import ray
from ray.exceptions import RayActorError, RayError

from envhub.clients.pooled import PooledEnvironment
from envhub.clients.replicas import ReplicaAddress
from envhub.errors import FleetError

__all__ = [
    "REGISTRY_NAME",
    "FleetEnvironment",
    "RayReplicas",
    "join_cluster",
    "no_fleet",
    "ray_error_cause",
    "registry_actor",
]

REGISTRY_NAME = "envhub-registry"
"""The fleet registry's actor name in the fleet's namespace: where replicas register and
clients read them (:class:`envhub.fleet.ray_actors.RegistryTable`)."""


def _host_port(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise FleetError(f"a Ray address is HOST:PORT (the head's GCS), got {address!r}")
    return host, int(port)


# An HTTP/2 client's opening (RFC 9113 section 3.4): the preface and an empty SETTINGS frame.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def _probe_gcs(host: str, port: int, timeout_s: float) -> str | None:
    """Why ``host:port`` is not a Ray head, or None. The GCS is a gRPC server, so it
    answers an HTTP/2 opening with a SETTINGS frame (type 4); anything else (nothing
    listening, a dashboard, an envhub server) fails here within ``timeout_s``, where
    ``ray.init`` would retry for minutes."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(_H2_PREFACE)
            header = b""
            while len(header) < 9:
                chunk = sock.recv(9 - len(header))
                if not chunk:
                    break
                header += chunk
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__
    return None if len(header) == 9 and header[3] == 4 else "not a Ray GCS (no gRPC answer)"


def join_cluster(address: str, namespace: str = "envhub", timeout_s: float = 15.0) -> None:
    """Join the Ray cluster at ``address`` (``HOST:PORT`` of the head) as a driver in
    ``namespace``; a no-op when this process already is. A bounded probe of the head's
    GCS comes first, so an address with no cluster is a :class:`FleetError` within
    ``timeout_s`` (5 s at most), never a hang."""
    host, port = _host_port(address)
    if (why := _probe_gcs(host, port, min(timeout_s, 5.0))) is not None:
        raise FleetError(
            f"no Ray cluster at {address} ({why}); start one with "
            f"`ray start --head --port {port}` or pass the head's address"
        )
    if ray.is_initialized():
        current = ray.get_runtime_context().gcs_address
        if current.rpartition(":")[2] != str(port):
            raise FleetError(
                f"this process is already connected to the Ray cluster at {current}, "
                f"not {address}"
            )
        return
    try:
        ray.init(
            address=address, namespace=namespace, logging_level=logging.WARNING,
            log_to_driver=False, ignore_reinit_error=True,
        )  # fmt: skip
    except (ConnectionError, RayError, ValueError) as exc:
        raise FleetError(f"cannot join the Ray cluster at {address}: {exc}") from None


def no_fleet(namespace: str, address: str) -> FleetError:
    """The error for a namespace with no fleet in it, naming the fix."""
    return FleetError(
        f"no envhub fleet in namespace {namespace!r} of the Ray cluster at {address} "
        "(start one with `envhub fleet up`)"
    )


def registry_actor(namespace: str, address: str) -> Any:
    """The namespace's registry actor, or a FleetError naming the fix."""
    try:
        return ray.get_actor(REGISTRY_NAME, namespace=namespace)
    except ValueError:
        raise no_fleet(namespace, address) from None


def ray_error_cause(exc: BaseException) -> str:
    """The last line of a Ray error that carries a remote traceback (the exception)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


class RayReplicas:
    """The replicas of ``env`` that the registry of ``namespace`` lists: a
    :class:`~envhub.clients.replicas.ReplicaSource`. Each read is one bounded call to the
    registry actor; a registry that is gone or silent is a :class:`FleetError`."""

    def __init__(
        self, address: str, env: str, namespace: str = "envhub", timeout_s: float = 10.0
    ) -> None:
        join_cluster(address, namespace)
        self.address = address
        self.env = env
        self.namespace = namespace
        self.timeout_s = timeout_s
        self._registry: Any = None

    @property
    def description(self) -> str:
        return f"the Ray fleet at {self.address} (namespace {self.namespace!r})"

    async def replicas(self) -> list[ReplicaAddress]:
        if self._registry is None:
            self._registry = await asyncio.to_thread(
                registry_actor, self.namespace, self.address
            )
        try:
            _, rows = await asyncio.wait_for(
                self._registry.listing.remote(self.env), self.timeout_s
            )
        except (RayActorError, asyncio.TimeoutError) as exc:
            self._registry = None
            raise FleetError(
                f"the fleet registry at {self.address} (namespace {self.namespace!r}) is "
                f"gone or silent: {ray_error_cause(exc) if str(exc) else type(exc).__name__}"
            ) from None
        return [
            ReplicaAddress(replica_id=row["replica_id"], url=row["url"], node_id=row["node_id"])
            for row in rows
        ]

    async def aclose(self) -> None:
        self._registry = None


class FleetEnvironment(PooledEnvironment):
    """Environment ``env`` on the replicas of the Ray fleet at ``address``: a
    :class:`~envhub.clients.pooled.PooledEnvironment` whose source is :class:`RayReplicas`.
    Joins the cluster at construction (a :class:`FleetError` when there is none); the
    other keyword arguments (``token``, ``wait_for_replica_s``...) are the pool's."""

    def __init__(
        self,
        address: str,
        env: str,
        options: dict[str, Any] | None = None,
        *,
        namespace: str = "envhub",
        **pool_kwargs: Any,
    ) -> None:
        super().__init__(RayReplicas(address, env, namespace), env, options, **pool_kwargs)
