"""Moved in 0.2, kept working until a later release: the fleet's control plane (``envhub
fleet up|status|down``) is :mod:`envhub.fleet.control`, its client
(:class:`FleetEnvironment`, :class:`RayReplicas`) is :mod:`envhub.clients.fleet`, and
``connect`` is :func:`envhub.clients.fleet.join_cluster`."""

from __future__ import annotations

import warnings

from envhub.clients.fleet import FleetEnvironment as FleetEnvironment
from envhub.clients.fleet import RayReplicas as RayReplicas
from envhub.clients.fleet import join_cluster as connect
from envhub.fleet.control import DownReport as DownReport
from envhub.fleet.control import ReplicaRecord as ReplicaRecord
from envhub.fleet.control import ReplicaStatus as ReplicaStatus
from envhub.fleet.control import fleet_down as fleet_down
from envhub.fleet.control import fleet_status as fleet_status
from envhub.fleet.control import fleet_up as fleet_up

__all__ = [
    "DownReport",
    "FleetEnvironment",
    "RayReplicas",
    "ReplicaRecord",
    "ReplicaStatus",
    "connect",
    "fleet_down",
    "fleet_status",
    "fleet_up",
]

warnings.warn(
    "envhub.fleet.ray_fleet moved to envhub.fleet.control (fleet up/status/down) and "
    "envhub.clients.fleet (FleetEnvironment; connect is join_cluster); the old path goes "
    "in a later release",
    DeprecationWarning,
    stacklevel=2,
)
