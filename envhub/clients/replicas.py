"""Where a pool's replicas come from: a :class:`ReplicaSource` lists them, the pool asks
again from time to time, so replicas may come and go while sessions run.

:class:`StaticReplicas` is a fixed list of ``envhub serve`` URLs (hand-started servers,
the pods behind a Kubernetes Service); the Ray fleet's registry is another source
(:class:`envhub.clients.fleet.RayReplicas`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["ReplicaAddress", "ReplicaSource", "StaticReplicas"]


@dataclass(frozen=True, slots=True)
class ReplicaAddress:
    """One server replica of an environment.

    ``replica_id`` names it in summaries and trajectories (``served_by``); a replica that
    restarts keeps its id and may come back at another ``url``. ``node_id`` is the
    machine it runs on, where the source knows it.
    """

    replica_id: str
    url: str
    node_id: str | None = None


@runtime_checkable
class ReplicaSource(Protocol):
    """The current replicas of one environment.

    ``replicas()`` raises :class:`envhub.errors.FleetError` when the source itself is
    gone (no cluster, no registry); an empty list means "none right now".
    """

    @property
    def description(self) -> str:
        """Where the replicas are listed, for error messages (``"ray://.../sql"``)."""
        ...

    async def replicas(self) -> list[ReplicaAddress]: ...

    async def aclose(self) -> None: ...


class StaticReplicas:
    """A fixed list of server URLs; each URL is its own replica id."""

    def __init__(self, urls: Sequence[str]) -> None:
        cleaned = [url.rstrip("/") for url in urls]
        if not cleaned:
            raise ValueError("a static pool needs at least one server URL")
        if len(set(cleaned)) != len(cleaned):
            raise ValueError(f"a server URL is listed twice: {', '.join(urls)}")
        self._addresses = [ReplicaAddress(replica_id=url, url=url) for url in cleaned]

    @property
    def description(self) -> str:
        return ", ".join(address.url for address in self._addresses)

    async def replicas(self) -> list[ReplicaAddress]:
        return list(self._addresses)

    async def aclose(self) -> None:
        return None
