"""Start, watch and stop environment containers (``envhub image run``, the fleet's
``--containers`` mode, the tests).

Network policy: every container joins the user-defined bridge :data:`NETWORK`, created
with IP masquerading and inter-container traffic off and its port bindings on 127.0.0.1,
and publishes only the API port, on 127.0.0.1. Without masquerading nothing a container
sends leaves this machine with a routable source address; on an engine running with
iptables (a normal docker host) ``enable_icc=false`` also keeps the containers apart.
Containers also run read-only where the image's recipe allows (tmpfs for what they must
write), with every capability dropped, ``no-new-privileges`` and limits on memory (no
swap beyond it), pids and, when asked, CPUs, as sandbox containers have.

An image whose environment makes its own ``bwrap`` sandboxes (recipe ``nested_sandbox``:
SWE) also gets :data:`NESTED_SANDBOX_OPTIONS`, and no other image does. The container still
runs as uid 1000 with no capability: bubblewrap makes unprivileged user namespaces. The
host Docker socket is never mounted into a container.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from envhub.environment_images.build import CONTAINER_PORT, LABEL
from envhub.errors import EnvhubError
from envhub.sandboxes.docker_cli import run_docker

__all__ = [
    "CONTAINER_LABEL",
    "NESTED_SANDBOX_OPTIONS",
    "NESTED_SANDBOX_SECCOMP",
    "NETWORK",
    "Container",
    "containers_labelled",
    "ensure_network",
    "health",
    "list_images",
    "remove_images",
    "start_container",
    "stop_container",
    "wait_healthy",
]

NETWORK = "envhub-images"
CONTAINER_LABEL = "envhub.image.container"  # on every container started here
_NETWORK_OPTIONS = {
    "com.docker.network.bridge.enable_ip_masquerade": "false",
    "com.docker.network.bridge.enable_icc": "false",
    "com.docker.network.bridge.host_binding_ipv4": "127.0.0.1",
}
#: The seccomp profile of ``nested_sandbox`` containers. Docker's default profile (an
#: allowlist, which the command line cannot extend) refuses ``unshare``/``clone`` of
#: namespaces, ``mount`` and ``pivot_root`` to a process without CAP_SYS_ADMIN, which
#: bubblewrap needs. This one allows every call but those it names, with EPERM: what
#: docker's default also refuses that an unprivileged process, or one in a user namespace,
#: could reach (the kernel keyring, eBPF, perf, userfaultfd, io_uring, the new mount API,
#: ``setns``, and module, kexec, clock, swap and quota calls).
NESTED_SANDBOX_SECCOMP = Path(__file__).with_name("nested_sandbox_seccomp.json")
#: What bubblewrap needs inside a container, relaxed for ``nested_sandbox`` images only:
#: the seccomp profile above; ``systempaths=unconfined`` because the kernel refuses a new
#: ``/proc`` (bwrap's pid namespace) while docker's masks cover parts of the container's.
#: That unmasks ``/proc`` and ``/sys`` for the server and for the fresh ``/proc`` of the
#: model's commands: docker's masked paths (``/proc/kcore``, ``/proc/keys``,
#: ``/proc/timer_list``, ``/proc/acpi``, ``/proc/sched_debug``, ``/proc/scsi``,
#: ``/sys/firmware``...) show the kernel's files, readable as their modes allow, and its
#: read-only ones (``/proc/sys``, ``/proc/bus``, ``/proc/fs``, ``/proc/irq``,
#: ``/proc/sysrq-trigger``) are writable mounts, whose root-owned files uid 1000 still
#: cannot write. ``apparmor=unconfined`` because docker-default AppArmor (hosts that have
#: AppArmor) denies ``mount``. The model's commands still run in bwrap's user/pid/net/mount
#: namespaces, without capabilities, under no-new-privileges.
NESTED_SANDBOX_OPTIONS = (
    "--security-opt", f"seccomp={NESTED_SANDBOX_SECCOMP}",
    "--security-opt", "systempaths=unconfined",
    "--security-opt", "apparmor=unconfined",
)  # fmt: skip


@dataclass(frozen=True)
class Container:
    """A running environment container: its id, image and the URL its API answers at."""

    id: str
    image: str
    url: str


def ensure_network() -> str:
    """The bridge network env containers join (created on first use; idempotent)."""
    if run_docker("network", "inspect", NETWORK).stdout.strip() in ("", "[]"):
        opts = [x for k, v in _NETWORK_OPTIONS.items() for x in ("-o", f"{k}={v}")]
        proc = run_docker(
            "network", "create", "--driver", "bridge", "--label", f"{LABEL}=network", *opts,
            NETWORK,
        )  # fmt: skip
        if proc.returncode != 0 and "already exists" not in proc.stderr:
            raise EnvhubError(f"docker network create {NETWORK} failed: {proc.stderr.strip()}")
    return NETWORK


def _run_flags(image: str) -> list[str]:
    """Read-only root, tmpfs and nested sandboxing as the image's recipe recorded them in
    its labels."""
    labels = json.loads(run_docker("image", "inspect", "-f", "{{json .Config.Labels}}", image,
                                   check=True).stdout)
    labels = labels or {}
    if labels.get(LABEL) != "env":
        raise EnvhubError(f"{image} is not an envhub environment image (envhub image build)")
    flags = ["--read-only"] if labels.get("envhub.run.read_only") == "1" else []
    for path in filter(None, labels.get("envhub.run.tmpfs", "").split(",")):
        flags += ["--tmpfs", f"{path}:rw,nosuid,nodev,size=512m"]
    if labels.get("envhub.run.nested_sandbox") == "1":
        flags += NESTED_SANDBOX_OPTIONS
    return flags


def start_container(
    image: str,
    *,
    port: int = 0,
    host: str = "127.0.0.1",
    token: str | None = None,
    env: dict[str, str] | None = None,
    args: list[str] | None = None,
    name: str | None = None,
    labels: dict[str, str] | None = None,
    wait_s: float = 180.0,
    memory: str = "4g",
    cpus: float | None = None,
    pids: int = 4096,
) -> Container:
    """Run ``image`` detached, publish its API on ``host:port`` (``0``: a free port; a
    fleet replica publishes on its node's address, everything else on 127.0.0.1),
    wait until it reports healthy and return it. ``token`` becomes ``ENVHUB_TOKEN``;
    ``args`` are appended to ``envhub serve ENV`` (``--max-turns 5``). ``memory`` (docker's
    notation, ``4g``; swap not added), ``cpus`` (``None``: all of them) and ``pids`` bound
    the container, where the model's tool calls run. A container that does not become
    healthy is removed and the error carries its log's tail."""
    ensure_network()
    name = name or f"envhub-{image.split('/')[-1].split(':')[0]}-{uuid.uuid4().hex[:8]}"
    # the token goes by name only (`-e NAME`): docker reads its value from the CLI's
    # environment, so it does not show in `ps`
    secret = {"ENVHUB_TOKEN": token} if token else {}
    cmd = [
        "run", "-d", "--name", name, "--network", NETWORK,
        "-p", f"{host}:{port or ''}:{CONTAINER_PORT}",
        "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
        "--memory", memory, "--memory-swap", memory, "--pids-limit", str(pids),
        *(["--cpus", str(cpus)] if cpus is not None else []),
        "--label", f"{CONTAINER_LABEL}=1",
        *(x for k, v in (labels or {}).items() for x in ("--label", f"{k}={v}")),
        *(x for k, v in (env or {}).items() for x in ("-e", f"{k}={v}")),
        *(x for k in secret for x in ("-e", k)),
        *_run_flags(image), image, *(args or []),
    ]  # fmt: skip
    cid = run_docker(*cmd, env=secret, check=True).stdout.strip()
    try:
        published = run_docker("port", cid, str(CONTAINER_PORT), check=True).stdout
        host_port = published.split()[0].rsplit(":", 1)[1]
        container = Container(cid, image, f"http://{host}:{host_port}")
        wait_healthy(container, wait_s)
    except BaseException:
        stop_container(cid)
        raise
    return container


def health(container_id: str) -> str:
    """Docker's view of the container: ``healthy``, ``starting``, ``unhealthy``, or the
    container state (``exited``, ``gone``...) when it is not running."""
    out = run_docker("inspect", "-f", "{{json .State}}", container_id).stdout.strip()
    if not out:
        return "gone"
    state = json.loads(out)
    if state.get("Status") != "running":
        return str(state.get("Status"))
    return str((state.get("Health") or {}).get("Status", "running"))


def wait_healthy(container: Container, timeout_s: float = 180.0) -> None:
    """Block until the container's health check passes; raise if it exits or times out."""
    deadline = time.monotonic() + timeout_s
    while (status := health(container.id)) != "healthy":
        if status not in ("starting", "running") or time.monotonic() > deadline:
            logs = run_docker("logs", "--tail", "30", container.id)
            raise EnvhubError(
                f"container of {container.image} is {status}, not healthy: "
                f"{(logs.stdout + logs.stderr)[-2000:]}"
            )
        time.sleep(0.25)


def containers_labelled(labels: dict[str, str]) -> list[str]:
    """Ids of the containers (running or not) that carry all of ``labels``."""
    filters = [x for k, v in labels.items() for x in ("--filter", f"label={k}={v}")]
    return run_docker("ps", "-aq", *filters, check=True).stdout.split()


def stop_container(container_id: str) -> None:
    """Stop and remove a container (no error if it is already gone)."""
    run_docker("rm", "-f", container_id)


def list_images(env: str | None = None) -> list[dict[str, str]]:
    """The environment and runtime images here: ``{repository, tag, id, size, created}``."""
    fmt = '{"repository":"{{.Repository}}","tag":"{{.Tag}}","id":"{{.ID}}",' \
          '"size":"{{.Size}}","created":"{{.CreatedSince}}"}'  # fmt: skip
    out = run_docker("images", "--filter", f"label={LABEL}", "--format", fmt, check=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    return [r for r in rows if env is None or r["repository"] == f"envhub/{env}"]


def remove_images(env: str | None = None, *, runtime: bool = False) -> list[str]:
    """Remove ``env``'s images (every environment's when ``None``; the shared runtime
    images too with ``runtime``); returns the references removed. Images still used by a
    container are left, and docker's error is raised."""
    refs = [
        r["id"] if "<none>" in (r["repository"], r["tag"]) else f"{r['repository']}:{r['tag']}"
        for r in list_images(env)
        if runtime or r["repository"] != "envhub/runtime"
    ]  # untagged leftovers of a failed build go by id
    if refs:
        run_docker("rmi", *refs, check=True)
    return refs
