"""One environment over many server replicas: a static pool of ``envhub serve`` URLs
(:class:`PooledEnvironment`) or a Ray fleet (:class:`FleetEnvironment`, ``envhub fleet``).

Ray is the fleet's control plane only (placement, restarts, discovery:
:mod:`envhub.fleet.control` and its actors, :mod:`envhub.fleet.ray_actors`) and an extra
(``pip install 'envhub-rl[ray]'``); this package imports it only when a fleet is used. The
clients live with the others, in :mod:`envhub.clients` (:mod:`~envhub.clients.pooled`,
:mod:`~envhub.clients.fleet`), and are re-exported here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from envhub.clients.pooled import PinnedSession, PooledEnvironment, ReplicaState
from envhub.clients.replicas import ReplicaAddress, ReplicaSource, StaticReplicas

if TYPE_CHECKING:
    from envhub.clients.fleet import FleetEnvironment

__all__ = [
    "FleetEnvironment",
    "PinnedSession",
    "PooledEnvironment",
    "ReplicaAddress",
    "ReplicaSource",
    "ReplicaState",
    "StaticReplicas",
]


def __getattr__(name: str) -> Any:
    """``FleetEnvironment`` imports Ray, so it is loaded on first use only."""
    if name == "FleetEnvironment":
        try:
            from envhub.clients.fleet import FleetEnvironment
        except ImportError as exc:
            if exc.name is None or exc.name.split(".")[0] != "ray":
                raise
            raise ImportError(
                "FleetEnvironment needs Ray: pip install 'envhub-rl[ray]'", name=exc.name
            ) from exc
        return FleetEnvironment
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
