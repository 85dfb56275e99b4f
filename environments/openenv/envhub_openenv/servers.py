"""Where the OpenEnv server is: a URL the operator runs, a command envhub starts, or a
container image envhub runs, as OpenEnv deploys one.

All three are operator configuration. A command or an image is started once per process
and options (on first use, from any thread or event loop: listings ask before any
episode), shared by all episodes, since an OpenEnv server gives each WebSocket session
its own environment instance; :func:`stop_servers` stops them (the environment's
``aclose_shared``, which closing any client of the environment in this process calls).
A server that episodes are using when it is asked to stop stops when the last of them
ends: closing one client (a second ``envhub.make``, an in-process check beside ``envhub
serve``) never kills the server under another client's episodes; a later episode starts
it again. A started server found dead is started again by the next episode that needs
it, so a crash masks the episodes it was running and their retries get a new server.

An image runs with envhub's container policy (:mod:`envhub.environment_images.run`): on
envhub's bridge network (no IP masquerading: nothing it sends leaves this machine with a
routable address; no traffic between containers), with every capability dropped,
``no-new-privileges`` and memory/pid limits, its port 8000 (OpenEnv's) published on
127.0.0.1 only. ``--network none`` is not possible for a server reached over TCP.
Readiness is OpenEnv's ``GET /health`` answering, polled here: the Docker health check
of OpenEnv's image template runs every 30 s, too rarely to wait on. The container runs
under an attached ``docker run --rm`` child process, which exits when the container does:
each episode's look at whether the server is alive is then a ``poll()``, as for a
command, not a ``docker inspect`` (a CLI call of 20 ms or more, under a lock every
episode of the image waits on), and the container's output is that process's.
"""

from __future__ import annotations

import shlex
import subprocess
import tempfile
import threading
import uuid
from dataclasses import dataclass
from typing import IO

from envhub.environment_images.run import CONTAINER_LABEL, ensure_network, stop_container
from envhub.errors import SandboxError
from envhub.sandboxes.docker_cli import docker_cli
from envhub.sandboxes.images import image_exists
from envhub.testing import free_port, wait_for_http

__all__ = ["PORT", "CommandServer", "ImageServer", "ServerSource", "UrlServer", "base_url",
           "hold", "parse_source", "release", "stop_servers"]

PORT = "{port}"  #: the placeholder of the free port in a command
OPENENV_PORT = 8000  #: the port OpenEnv's images serve on
_STDERR_TAIL = 2000
_POLL_S = 0.1


@dataclass(frozen=True)
class UrlServer:
    """A server the operator runs."""

    url: str

    def describe(self) -> str:
        return self.url


@dataclass(frozen=True)
class CommandServer:
    """A server envhub starts as a subprocess; ``{port}`` in the argv is a free port."""

    argv: tuple[str, ...]

    def describe(self) -> str:
        return shlex.join(self.argv)


@dataclass(frozen=True)
class ImageServer:
    """A server envhub runs from a container image that serves on port 8000."""

    image: str
    memory: str = "4g"

    def describe(self) -> str:
        return f"image {self.image}"


ServerSource = UrlServer | CommandServer | ImageServer


def parse_source(url: str | None, command: str | list[str] | None,
                 image: str | None) -> ServerSource:
    """The server an operator named: exactly one of ``url``, ``command`` or ``image`` (one
    the local Docker engine has)."""
    given = [name for name, value in (("url", url), ("command", command), ("image", image))
             if value is not None]
    if len(given) != 1:
        raise ValueError("give the OpenEnv server as exactly one of url=, command= or image= "
                         f"(got {', '.join(given) or 'none'})")
    if url is not None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"url={url!r} is not an http(s) URL")
        return UrlServer(url.rstrip("/"))
    if image is not None:
        _check_image(image)
        return ImageServer(image)
    argv = shlex.split(command) if isinstance(command, str) else list(command or [])
    if not argv or not any(PORT in a for a in argv):
        raise ValueError(f"command= must name the port the server listens on as {PORT}")
    return CommandServer(tuple(argv))


_present: set[str] = set()  # images found in the local engine (asked once per process)


def _check_image(image: str) -> None:
    """Refuse an image the local Docker engine does not have, before any episode: else
    every episode would be masked (``docker run`` failing is infrastructure) until the
    rollout's circuit breaker stops it. Pulling is the operator's step, not envhub's."""
    if image in _present:
        return
    try:
        found = image_exists(image)
    except (OSError, SandboxError) as exc:
        raise ValueError(f"image={image!r}: cannot ask Docker for it: {exc}") from None
    if not found:
        raise ValueError(f"image={image!r} is not in the local Docker engine "
                         f"(docker pull {image}, or build it: openenv build)")
    _present.add(image)


class _Running:
    """A started server: its URL, its process (the command, or the attached ``docker
    run`` of its container) with its output, and its container, if any."""

    def __init__(self, url: str, proc: subprocess.Popen[bytes], output: IO[str],
                 container: str | None = None) -> None:
        self.url, self.proc, self.output, self.container = url, proc, output, container

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self) -> str:
        self.output.flush()
        self.output.seek(0)
        text = self.output.read()[-_STDERR_TAIL:].strip()
        return f"; its output ends: {text}" if text else ""

    def stop(self) -> None:
        if self.container is not None:
            stop_container(self.container)  # its docker run then exits
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.output.close()


_lock = threading.Lock()  # guards _locks, _episodes and _stop_when_idle
_locks: dict[ServerSource, threading.Lock] = {}  # one per source: held while it starts
_running: dict[ServerSource, _Running] = {}
_episodes: dict[ServerSource, int] = {}  # episodes using each source's server now
_stop_when_idle: set[ServerSource] = set()  # asked to stop while episodes used them


def _spawn(source: ServerSource, argv: list[str], port: int,
           container: str | None = None) -> _Running:
    output = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=output, stderr=output)
    except OSError as exc:
        output.close()
        raise SandboxError(f"OpenEnv server {source.describe()} failed to start: {exc}") from None
    return _Running(f"http://127.0.0.1:{port}", proc, output, container)


def _start_command(source: CommandServer) -> _Running:
    port = free_port()
    return _spawn(source, [a.replace(PORT, str(port)) for a in source.argv], port)


def _start_image(source: ImageServer) -> _Running:
    network = ensure_network()
    name = f"envhub-openenv-{uuid.uuid4().hex[:8]}"
    port = free_port()
    argv = [
        docker_cli(), "run", "--rm", "--pull", "never", "--name", name, "--network", network,
        "-p", f"127.0.0.1:{port}:{OPENENV_PORT}",
        "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
        "--memory", source.memory, "--memory-swap", source.memory, "--pids-limit", "4096",
        "--label", f"{CONTAINER_LABEL}=1", source.image,
    ]  # fmt: skip
    return _spawn(source, argv, port, container=name)


def _wait_ready(source: ServerSource, running: _Running, timeout_s: float) -> None:
    if wait_for_http(f"{running.url}/health", timeout_s=timeout_s,
                     gone=lambda: not running.alive(), interval_s=_POLL_S):  # fmt: skip
        return
    if not running.alive():
        why = f"OpenEnv server {source.describe()} exited while starting{running.tail()}"
    else:
        why = (f"OpenEnv server {source.describe()} did not answer /health within "
               f"{timeout_s:g}s{running.tail()}")
    running.stop()
    raise SandboxError(why)


def _lock_of(source: ServerSource) -> threading.Lock:
    with _lock:
        return _locks.setdefault(source, threading.Lock())


def base_url(source: ServerSource, startup_timeout_s: float) -> str:
    """The URL of ``source``, started (or started again, when it died) first if envhub
    runs it. Blocks: call it from a worker thread in async code. Two sources start side
    by side; callers waiting on one source's start wait once."""
    if isinstance(source, UrlServer):
        return source.url
    with _lock_of(source):
        running = _running.get(source)
        if running is not None and running.alive():
            return running.url
        if running is not None:
            del _running[source]
            running.stop()
        running = _start_command(source) if isinstance(source, CommandServer) \
            else _start_image(source)
        _wait_ready(source, running, startup_timeout_s)
        _running[source] = running
        return running.url


def hold(source: ServerSource) -> None:
    """An episode uses ``source``'s server until it calls :func:`release`."""
    with _lock:
        _episodes[source] = _episodes.get(source, 0) + 1
        _stop_when_idle.discard(source)  # needed again


def release(source: ServerSource) -> None:
    """An episode is done with ``source``'s server: stop it if it was asked to stop
    while in use and this was its last episode. Blocks while it stops."""
    with _lock:
        _episodes[source] -= 1
        if _episodes[source] > 0:
            return
        del _episodes[source]
        if source not in _stop_when_idle:
            return
        _stop_when_idle.discard(source)
    _stop(source)


def _stop(source: ServerSource) -> None:
    with _lock_of(source):
        running = _running.pop(source, None)
        if running is not None:
            running.stop()


def stop_servers() -> None:
    """Stop every server this process started that no episode uses; one in use stops
    when its last episode ends (:func:`release`)."""
    for source in list(_running):
        with _lock:
            if _episodes.get(source, 0) > 0:
                _stop_when_idle.add(source)
                continue
        _stop(source)
