"""The fleet's two halves: the client (:mod:`envhub.clients.fleet`, the data plane) loads
none of the control plane (:mod:`envhub.fleet.control`, its actors, the server), and the
0.1 path ``envhub.fleet.ray_fleet`` still gives both, with a DeprecationWarning."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

if not os.environ.get("ENVHUB_REQUIRE_RAY"):  # CI sets it: there a missing Ray fails
    pytest.importorskip("ray", reason="ray is not installed (pip install 'envhub-rl[ray]')")

import envhub.fleet
from envhub.clients import fleet as client
from envhub.fleet import control


def test_the_client_loads_no_control_plane() -> None:
    probe = (
        "import sys, envhub.clients.fleet; "
        "print(sorted(m for m in ('envhub.fleet.control', 'envhub.fleet.ray_actors', "
        "'envhub.server', 'envhub.environment_images') if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    ).stdout.strip()
    assert loaded == "[]"


def test_the_old_path_gives_both_halves_with_a_warning() -> None:
    sys.modules.pop("envhub.fleet.ray_fleet", None)
    moved = r"envhub\.fleet\.control .* envhub\.clients\.fleet"
    with pytest.warns(DeprecationWarning, match=moved):
        old = importlib.import_module("envhub.fleet.ray_fleet")
    assert old.FleetEnvironment is client.FleetEnvironment is envhub.fleet.FleetEnvironment
    assert old.RayReplicas is client.RayReplicas and old.connect is client.join_cluster
    for name in ("DownReport", "ReplicaRecord", "ReplicaStatus", "fleet_up", "fleet_status",
                 "fleet_down"):  # fmt: skip
        assert getattr(old, name) is getattr(control, name)
