"""A real multi-node Ray cluster on this machine for the fleet tests.

``ray_cluster`` (package-scoped: it stops with the last fleet test, since an idle
three-node cluster burns about 5% of a core for as long as it runs) is a
:class:`~envhub.fleet.local_cluster.LocalRayCluster` (``ray start``, dashboard off, every
address 127.0.0.1, a private ``--temp-dir``) of a head node and two worker nodes:

- ``.address``: ``"127.0.0.1:PORT"``, the head's GCS address for ``fleet_up`` /
  ``FleetEnvironment`` / ``envhub fleet --address``;
- ``.nodes``: the nodes by name (``"head"``, ``"worker-1"``, ``"worker-2"``), each a
  ``RayNode`` with its Ray ``node_id`` and logical resources: the head has 2 CPUs,
  worker-1 4 CPUs, worker-2 4 CPUs and 2 ``sandbox_slots`` (a custom resource);
- ``.alive_node_ids()``: the node ids Ray reports alive now;
- ``.add_worker(name, num_cpus=..., resources=...)``: start one more worker node;
- ``.kill_node(name)``: SIGKILL a worker node's raylet and every process under it (its
  actors' workers included), as a machine failure would; returns once Ray reports the
  node dead (about 3 s) and drops it from ``.nodes``.

The three base nodes are shared by every fleet test: kill only nodes you added,
and remove what a test starts (``fleet_down``, one namespace per test or module).

Teardown kills only this cluster's processes, never ``ray stop``. Test modules that need
Ray skip themselves where it is not installed, unless ``ENVHUB_REQUIRE_RAY`` is set (CI
sets it), in which case they fail instead; using ``ray_cluster`` without Ray fails.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from envhub.fleet.local_cluster import LocalRayCluster


@pytest.fixture(scope="package")
def ray_cluster() -> Iterator[LocalRayCluster]:
    if importlib.util.find_spec("ray") is None:
        raise RuntimeError("the ray_cluster fixture needs Ray: pip install 'envhub-rl[ray]'")
    from envhub.fleet.local_cluster import local_ray_cluster

    with local_ray_cluster(head_cpus=2) as cluster:
        cluster.add_worker("worker-1", num_cpus=4)
        cluster.add_worker("worker-2", num_cpus=4, resources={"sandbox_slots": 2})
        yield cluster
