"""One environment over many server replicas: a static pool of ``envhub serve`` URLs
(:class:`PooledEnvironment`) or a Ray fleet (:class:`FleetEnvironment`, ``envhub fleet``).

Ray is the fleet's control plane only (placement, restarts, discovery) and an extra
(``pip install 'envhub[ray]'``); this package imports it only when a fleet is used.
"""

from __future__ import annotations

from envhub.fleet.pool import PinnedSession, PooledEnvironment, ReplicaState
from envhub.fleet.replicas import ReplicaAddress, ReplicaSource, StaticReplicas

__all__ = [
    "PinnedSession",
    "PooledEnvironment",
    "ReplicaAddress",
    "ReplicaSource",
    "ReplicaState",
    "StaticReplicas",
]
