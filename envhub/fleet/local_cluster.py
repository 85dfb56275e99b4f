"""A real multi-node Ray cluster on this machine, for the fleet's tests and benchmarks.

:func:`local_ray_cluster` starts a head node with ``ray start`` (dashboard off, every
address 127.0.0.1, a private ``--temp-dir``) and yields a :class:`LocalRayCluster`, to
which :meth:`~LocalRayCluster.add_worker` adds worker nodes (each a raylet of its own, as
on another machine) and from which :meth:`~LocalRayCluster.kill_node` removes one the way
a machine failure would. Teardown kills only this cluster's processes (those started
under its temp dir, and their descendants), never ``ray stop``, which would stop every
Ray process on the machine.

Needs Ray and psutil (``pip install 'envhub-rl[ray,test]'``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import ray

from envhub._util.net import free_port
from envhub.clients.fleet import join_cluster

__all__ = ["LocalRayCluster", "RayNode", "local_ray_cluster"]

_RAY = str(Path(sys.executable).with_name("ray"))
# Ray warms up worker processes for the first driver; on a 2-core machine that is seconds
# of CPU per node for workers nobody uses. A killed node is declared dead after three
# missed 1 s health checks (the default is about 15 s).
_CLUSTER_ENV = {
    "RAY_prestart_worker_first_driver": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}


def _port() -> int:
    """A free port outside Ray's worker-port range (10002-19999)."""
    return free_port(low=20000, high=60000)


@dataclass
class RayNode:
    """One node of the cluster: its name here, Ray's node id, the port its raylet listens
    on (what finds its processes) and its logical resources."""

    name: str
    node_id: str
    manager_port: int
    resources: dict[str, float] = field(default_factory=dict)


@dataclass
class LocalRayCluster:
    """The cluster :func:`local_ray_cluster` started: ``address`` (``"127.0.0.1:PORT"``,
    the head's GCS, for ``fleet_up``/``FleetEnvironment``/``--address``) and its
    ``nodes`` by name (``"head"`` and the workers added)."""

    address: str
    temp_dir: Path
    namespace: str = "envhub"
    nodes: dict[str, RayNode] = field(default_factory=dict)

    def start_node(
        self,
        name: str,
        args: list[str],
        num_cpus: int,
        resources: dict[str, float],
        attempts_left: int = 1,
    ) -> RayNode:
        """``ray start`` one node (``args`` say head or worker) and learn its node id.

        ``ray start`` gives up when its raylet has not registered with the GCS within a
        hard-coded 30 s, which happens on a loaded 2-core CI machine; the raylet it left
        running often registers a little later. So a failed start still waits for the
        node to appear, and only if it never does is that raylet killed and the start
        retried (``attempts_left`` times) on fresh ports.
        """
        manager_port = _port()
        done = subprocess.run(
            [_RAY, "start", *args, "--node-ip-address", "127.0.0.1", "--disable-usage-stats",
             "--num-cpus", str(num_cpus), "--resources", json.dumps(resources),
             "--node-manager-port", str(manager_port),
             "--dashboard-agent-listen-port", str(_port())],
            env={**os.environ, **_CLUSTER_ENV}, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        try:
            node_id = self._node_id(manager_port, wait_s=60 if done.returncode == 0 else 30)
        except RuntimeError:
            if attempts_left <= 0:
                raise RuntimeError(
                    f"ray start ({name}) failed:\n{done.stdout}\n{done.stderr}"
                ) from None
            self._kill_raylet(manager_port)
            return self.start_node(name, args, num_cpus, resources, attempts_left - 1)
        node = RayNode(name, node_id, manager_port, {"CPU": num_cpus, **resources})
        self.nodes[name] = node
        return node

    def _node_id(self, manager_port: int, wait_s: float = 60) -> str:
        """The id of the node whose raylet listens on ``manager_port`` (asks the GCS)."""
        self.connect()
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            for node in ray.nodes():
                if node["NodeManagerPort"] == manager_port and node["Alive"]:
                    return str(node["NodeID"])
            time.sleep(0.5)
        raise RuntimeError(f"no alive node with node manager port {manager_port}")

    def add_worker(
        self, name: str, *, num_cpus: int = 2, resources: dict[str, float] | None = None
    ) -> RayNode:
        """Start a worker node (``num_cpus`` CPUs and custom ``resources``) named ``name``."""
        return self.start_node(name, ["--address", self.address], num_cpus, resources or {})

    def connect(self) -> None:
        """Make this process a driver of the cluster, in ``namespace``."""
        join_cluster(self.address, self.namespace)

    def alive_node_ids(self) -> set[str]:
        self.connect()
        return {node["NodeID"] for node in ray.nodes() if node["Alive"]}

    def _raylet(self, manager_port: int) -> psutil.Process:
        flag = f"--node_manager_port={manager_port}"
        for proc in psutil.process_iter(["name", "cmdline"]):
            if proc.info["name"] == "raylet" and flag in (proc.info["cmdline"] or []):
                return proc
        raise LookupError(f"no raylet listens on node manager port {manager_port}")

    def _kill_raylet(self, manager_port: int) -> None:
        """Kill what a failed ``ray start`` left behind, if anything."""
        with contextlib.suppress(LookupError):
            _kill_tree([self._raylet(manager_port)])

    def kill_node(self, name: str, *, wait_dead: bool = True) -> None:
        """SIGKILL the node's raylet and everything under it (its actors' workers
        included), as a machine failure would, and drop it from ``nodes``. Returns once
        the processes are dead and, with ``wait_dead``, once Ray reports the node dead
        (about 3 s)."""
        node = self.nodes.pop(name)
        _kill_tree([self._raylet(node.manager_port)])
        deadline = time.monotonic() + 60
        while wait_dead and node.node_id in self.alive_node_ids():
            if time.monotonic() > deadline:
                raise TimeoutError(f"Ray still reports node {name} alive")
            time.sleep(0.5)

    def processes(self) -> list[psutil.Process]:
        """This cluster's processes: those started under its temp dir, and descendants."""
        tag = str(self.temp_dir)
        roots = [
            proc for proc in psutil.process_iter(["cmdline"])
            if any(tag in arg for arg in proc.info["cmdline"] or [])
        ]  # fmt: skip
        found = {proc.pid: proc for proc in roots}
        for proc in roots:
            with contextlib.suppress(psutil.NoSuchProcess):
                found.update({child.pid: child for child in proc.children(recursive=True)})
        return list(found.values())

    def stop(self) -> None:
        """Kill every process of the cluster (no ``ray stop``: other clusters stay)."""
        _kill_tree(self.processes())


def _kill_tree(procs: list[psutil.Process]) -> None:
    everything = {}
    for proc in procs:
        everything[proc.pid] = proc
        with contextlib.suppress(psutil.NoSuchProcess):
            everything.update({c.pid: c for c in proc.children(recursive=True)})
    for proc in everything.values():
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(list(everything.values()), timeout=10)


@contextlib.contextmanager
def local_ray_cluster(
    *, head_cpus: int = 2, namespace: str = "envhub", prefix: str = "envhub-ray-"
) -> Iterator[LocalRayCluster]:
    """A head node of ``head_cpus`` CPUs (add workers with
    :meth:`LocalRayCluster.add_worker`); on exit this process leaves the cluster and every
    process of it is killed, its temp dir (``prefix``...) removed."""
    temp_dir = Path(tempfile.mkdtemp(prefix=prefix))
    port = _port()
    cluster = LocalRayCluster(address=f"127.0.0.1:{port}", temp_dir=temp_dir,
                              namespace=namespace)  # fmt: skip
    try:
        head = ["--head", "--port", str(port), "--include-dashboard=false",
                "--temp-dir", str(temp_dir)]  # fmt: skip
        cluster.start_node("head", head, num_cpus=head_cpus, resources={})
        yield cluster
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)
