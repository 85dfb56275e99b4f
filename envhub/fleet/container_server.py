"""A fleet replica's server as a container (``envhub fleet up --containers``).

Instead of serving the app from its own process, the replica actor runs its
environment's image (:mod:`envhub.environment_images`) on its node and supervises it: a thread
polls docker's health status, and a container that exits or turns unhealthy is removed
and replaced by a new one (a new port), which the replica registers again. Containers
carry the replica id and namespace as labels, so a restarted actor removes what its dead
process left running before it starts its own.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from envhub.environment_images.run import (
    Container,
    containers_labelled,
    health,
    start_container,
    stop_container,
)

__all__ = ["ContainerServer", "reap_replica_containers", "serve_args"]

log = logging.getLogger("envhub.fleet")

_REPLICA_LABEL = "envhub.fleet.replica"
_NAMESPACE_LABEL = "envhub.fleet.namespace"
_POLL_S = 1.0

#: :func:`envhub.server.build_app` settings -> ``envhub serve`` flags (``token`` travels
#: as ENVHUB_TOKEN)
_SERVE_FLAGS = {
    "max_sessions": "--max-sessions",
    "session_ttl_s": "--session-ttl",
    "max_body_bytes": "--max-body-bytes",
    "max_turns": "--max-turns",
    "tool_timeout_s": "--tool-timeout",
    "episode_timeout_s": "--episode-timeout",
    "max_output_chars": "--max-output-chars",
}


def serve_args(options: dict[str, Any], serve: dict[str, Any]) -> list[str]:
    """The ``envhub serve ENV`` arguments that host the environment as a process replica
    with ``options`` and ``serve`` settings would."""
    args = [x for k, v in options.items() for x in ("--env-arg", f"{k}={json.dumps(v)}")]
    for name, value in serve.items():
        if name == "mcp":
            args += ["--mcp"] if value else []
        elif name in _SERVE_FLAGS and value is not None:
            args += [_SERVE_FLAGS[name], str(value)]
    return args


class ContainerServer:
    """Runs ``image`` for one replica and keeps it running until :meth:`stop`.

    ``on_replaced(url)`` is called (from the supervising thread) after a replacement
    container is healthy, so the replica can register the new URL; an error it raises is
    logged and supervision goes on. A replacement starts outside the lock, so :meth:`stop`
    does not wait for its health check; one that comes up after :meth:`stop` is removed.
    """

    def __init__(
        self,
        image: str,
        *,
        replica_id: str,
        namespace: str,
        host: str,
        token: str | None,
        args: list[str],
        on_replaced: Callable[[str], None],
    ) -> None:
        self.image = image
        self._labels = {_REPLICA_LABEL: replica_id, _NAMESPACE_LABEL: namespace}
        self._host, self._token, self._args = host, token, args
        self._on_replaced = on_replaced
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self.replacements = 0
        reap_replica_containers(replica_id, namespace)
        self.container = self._start()
        self._thread = threading.Thread(
            target=self._supervise, name=f"envhub-container-{replica_id}", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        return self.container.url

    def _start(self) -> Container:
        return start_container(
            self.image, host=self._host, token=self._token, args=self._args, labels=self._labels
        )

    def _supervise(self) -> None:
        while not self._stopping.wait(_POLL_S):
            status = health(self.container.id)
            if status in ("healthy", "starting", "running"):
                continue
            log.warning("container %s of %s is %s: replacing it",
                        self.container.id[:12], self.image, status)  # fmt: skip
            with self._lock:
                if self._stopping.is_set():
                    return
                stop_container(self.container.id)
            try:
                container = self._start()
            except Exception as exc:  # retried at the next poll
                log.warning("replacement container of %s failed: %s", self.image, exc)
                continue
            with self._lock:
                if self._stopping.is_set():
                    stop_container(container.id)
                    return
                self.container = container
                self.replacements += 1
            try:
                self._on_replaced(container.url)
            except Exception:
                log.exception("registering the replacement container of %s failed", self.image)

    def stop(self) -> None:
        """Stop supervising and remove the container."""
        self._stopping.set()
        with self._lock:
            stop_container(self.container.id)
        self._thread.join(timeout=5)


def reap_replica_containers(replica_id: str, namespace: str) -> int:
    """Remove containers an earlier process of this replica left; returns how many."""
    ids = containers_labelled({_REPLICA_LABEL: replica_id, _NAMESPACE_LABEL: namespace})
    for cid in ids:
        stop_container(cid)
    return len(ids)
