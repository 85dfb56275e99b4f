"""A real multi-node Ray cluster on this machine for the fleet tests.

``ray_cluster`` (session-scoped) starts a head node and two worker nodes with ``ray
start`` (dashboard off, every address 127.0.0.1, a private ``--temp-dir``) and yields a
:class:`RayCluster`:

- ``.address``: ``"127.0.0.1:PORT"``, the head's GCS address for ``fleet_up`` /
  ``FleetEnvironment`` / ``envhub fleet --address``;
- ``.nodes``: the nodes by name (``"head"``, ``"worker-1"``, ``"worker-2"``), each a
  :class:`RayNode` with its Ray ``node_id`` and logical resources: the head has 2 CPUs,
  worker-1 4 CPUs, worker-2 4 CPUs and 2 ``sandbox_slots`` (a custom resource);
- ``.alive_node_ids()``: the node ids Ray reports alive now;
- ``.add_worker(name, num_cpus=..., resources=...)``: start one more worker node;
- ``.kill_node(name)``: SIGKILL a worker node's raylet and every process under it (its
  actors' workers included), as a machine failure would; returns once Ray reports the
  node dead (about 3 s) and drops it from ``.nodes``.

The three base nodes are shared by every test of the session: kill only nodes you added,
and remove what a test starts (``fleet_down``, one namespace per test or module).

Teardown kills only this cluster's processes (those started under its temp dir, and
their descendants), never ``ray stop``, which would stop every Ray process on the
machine. Test modules that need Ray skip themselves where it is not installed, unless
``ENVHUB_REQUIRE_RAY`` is set (CI sets it), in which case they fail instead; using
``ray_cluster`` without Ray fails.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

try:
    import ray
except ImportError:  # the Ray tests skip themselves (fail, with ENVHUB_REQUIRE_RAY set)
    ray = None

_RAY = str(Path(sys.executable).with_name("ray"))
# Ray warms up worker processes for the first driver; on a 2-core machine that is seconds
# of CPU per node for workers no test uses. A killed node is declared dead after three
# missed 1 s health checks (the default is about 15 s).
_CLUSTER_ENV = {
    "RAY_prestart_worker_first_driver": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}


def free_port(low: int = 20000, high: int = 60000) -> int:
    """A free TCP port outside Ray's worker-port range (10002-19999)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if low <= port < high:
            return port


@dataclass
class RayNode:
    name: str
    node_id: str
    manager_port: int
    resources: dict[str, float] = field(default_factory=dict)


@dataclass
class RayCluster:
    address: str
    temp_dir: Path
    nodes: dict[str, RayNode] = field(default_factory=dict)

    def _start(
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
        manager_port = free_port()
        done = subprocess.run(
            [_RAY, "start", *args, "--node-ip-address", "127.0.0.1", "--disable-usage-stats",
             "--num-cpus", str(num_cpus), "--resources", json.dumps(resources),
             "--node-manager-port", str(manager_port),
             "--dashboard-agent-listen-port", str(free_port())],
            env={**os.environ, **_CLUSTER_ENV}, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        try:
            node_id = self._node_id(manager_port, wait_s=60 if done.returncode == 0 else 30)
        except RuntimeError:
            if attempts_left <= 0:
                raise RuntimeError(
                    f"ray start ({name}) failed:\n{done.stdout}\n{done.stderr}"
                ) from None
            self._kill_raylet(manager_port)
            return self._start(name, args, num_cpus, resources, attempts_left - 1)
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
        return self._start(name, ["--address", self.address], num_cpus, resources or {})

    def connect(self) -> None:
        """Make this process a driver of the cluster (``envhub.fleet.ray_fleet.connect``)."""
        from envhub.fleet.ray_fleet import connect

        connect(self.address)

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
        try:
            _kill_tree([self._raylet(manager_port)])
        except LookupError:
            pass

    def kill_node(self, name: str) -> None:
        """SIGKILL the node's raylet and everything under it; waits until Ray sees it dead."""
        node = self.nodes.pop(name)
        _kill_tree([self._raylet(node.manager_port)])
        deadline = time.monotonic() + 60
        while node.node_id in self.alive_node_ids():
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
            try:
                found.update({child.pid: child for child in proc.children(recursive=True)})
            except psutil.NoSuchProcess:
                pass
        return list(found.values())

    def stop(self) -> None:
        _kill_tree(self.processes())


def _kill_tree(procs: list[psutil.Process]) -> None:
    everything = {}
    for proc in procs:
        everything[proc.pid] = proc
        try:
            everything.update({c.pid: c for c in proc.children(recursive=True)})
        except psutil.NoSuchProcess:
            pass
    for proc in everything.values():
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(list(everything.values()), timeout=10)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    if ray is None:
        raise RuntimeError("the ray_cluster fixture needs Ray: pip install 'envhub[ray]'")
    temp_dir = Path(tempfile.mkdtemp(prefix="envhub-ray-"))
    port = free_port()
    cluster = RayCluster(address=f"127.0.0.1:{port}", temp_dir=temp_dir)
    try:
        head = ["--head", "--port", str(port), "--include-dashboard=false",
                "--temp-dir", str(temp_dir)]  # fmt: skip
        cluster._start("head", head, num_cpus=2, resources={})
        cluster.add_worker("worker-1", num_cpus=4)
        cluster.add_worker("worker-2", num_cpus=4, resources={"sandbox_slots": 2})
        yield cluster
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)
