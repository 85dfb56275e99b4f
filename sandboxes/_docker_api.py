"""A minimal async Docker Engine API client for the one hot call: exec.

Why not the SDK or the CLI for exec: the SDK is blocking (a worker thread per call)
and ``exec_run`` buffers the whole output; the ``docker exec`` CLI costs a Go process
start (~50 ms here) per command. Speaking HTTP over the engine's unix socket with httpx
(a core dependency) gives a streamed, capped, cancellable exec in three requests
(create, start, inspect). Commands that need stdin still use the CLI (attaching stdin
needs a hijacked connection). Paths are unversioned so any engine version answers.

Engine errors (the container is gone, the engine does not answer) raise
``SandboxError``; anything the command itself can cause, including holding its exec
open past the deadline, is a result.
"""

from __future__ import annotations

import asyncio
import os
import struct
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from envhub.errors import SandboxError
from envhub.sandboxes._proc import CappedBuffer
from envhub.sandboxes.base import RawResult

__all__ = ["engine_socket", "exec_api"]

_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
    weakref.WeakKeyDictionary()
)


def engine_socket() -> str | None:
    """The engine's unix socket path, or None when DOCKER_HOST is not a unix socket."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return None
    path = host[len("unix://") :]
    return path if os.path.exists(path) else None


def _client(sock: str) -> httpx.AsyncClient:
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        transport = httpx.AsyncHTTPTransport(
            uds=sock, limits=httpx.Limits(max_connections=256, max_keepalive_connections=64)
        )
        client = httpx.AsyncClient(transport=transport, base_url="http://docker", timeout=None)
        _clients[loop] = client
    return client


_STATE_TIMEOUT_S = 30.0


def _check(resp: httpx.Response, what: str) -> None:
    if resp.status_code >= 400:
        try:
            msg = resp.json().get("message", resp.text)
        except ValueError:
            msg = resp.text
        raise SandboxError(f"docker {what} failed ({resp.status_code}): {msg}")


async def exec_api(
    sock: str,
    container_id: str,
    argv: Sequence[str],
    *,
    user: str | None = None,
    workdir: str | None,
    env: Mapping[str, str] | None,
    limit: int,
    timeout: float,
) -> RawResult:
    """Run ``argv`` in the container, demultiplexing and capping stdout/stderr.

    ``timeout`` is a backstop above the command's own deadline: past it the output so
    far is returned (timed out, unless the exec did end and only a leftover child held
    its output open), or ``SandboxError`` if the container itself has stopped.
    """
    try:
        return await _exec(sock, container_id, argv, user, workdir, env, limit, timeout)
    except httpx.HTTPError as exc:
        raise SandboxError(f"docker engine: {type(exc).__name__}: {exc}") from exc


async def _exec(
    sock: str,
    container_id: str,
    argv: Sequence[str],
    user: str | None,
    workdir: str | None,
    env: Mapping[str, str] | None,
    limit: int,
    timeout: float,
) -> RawResult:
    client = _client(sock)
    t0 = time.monotonic()
    body: dict[str, Any] = {"Cmd": list(argv), "AttachStdout": True, "AttachStderr": True}
    if user:
        body["User"] = user
    if workdir:
        body["WorkingDir"] = workdir
    if env:
        body["Env"] = [f"{k}={v}" for k, v in env.items()]
    resp = await client.post(f"/containers/{container_id}/exec", json=body)
    await resp.aread()
    _check(resp, "exec create")
    exec_id = resp.json()["Id"]
    out, err = CappedBuffer(limit), CappedBuffer(limit)
    held_open = False
    try:
        await asyncio.wait_for(_stream(client, exec_id, out, err), timeout)
    except asyncio.TimeoutError:
        # Held open by what the command did (a stopped process, a detached child keeping
        # the output pipe): the command's outcome while the container runs.
        try:
            await asyncio.wait_for(_require_running(client, container_id), _STATE_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise SandboxError("the docker engine did not answer a container inspect") from None
        held_open = True
    code = None
    for _ in range(1 if held_open else 50):
        info = await client.get(f"/exec/{exec_id}/json")
        await info.aread()
        _check(info, "exec inspect")
        data = info.json()
        if not data.get("Running") and data.get("ExitCode") is not None:
            code = int(data["ExitCode"])
            break
        await asyncio.sleep(0.01)
    if code is None and not held_open:
        raise SandboxError("docker exec finished streaming but reported no exit code")
    return RawResult(
        exit_code=137 if code is None else code,
        timed_out=code is None,
        stdout=out.value(),
        stderr=err.value(),
        duration_s=time.monotonic() - t0,
        stdout_bytes=out.total,
        stderr_bytes=err.total,
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
    )


async def _require_running(client: httpx.AsyncClient, container_id: str) -> None:
    resp = await client.get(f"/containers/{container_id}/json")
    await resp.aread()
    _check(resp, "container inspect")
    state = resp.json().get("State") or {}
    if not state.get("Running"):
        raise SandboxError(f"the sandbox container stopped ({state.get('Status', 'unknown')})")


async def _stream(
    client: httpx.AsyncClient, exec_id: str, out: CappedBuffer, err: CappedBuffer
) -> None:
    """Read the multiplexed stream: 8-byte header (stream id, size) + payload."""
    sinks = {1: out, 2: err}
    async with client.stream(
        "POST", f"/exec/{exec_id}/start", json={"Detach": False, "Tty": False}
    ) as resp:
        if resp.status_code >= 400:
            await resp.aread()
            _check(resp, "exec start")
        pending = bytearray()
        need: int | None = None
        sink: CappedBuffer | None = None
        async for chunk in resp.aiter_raw():
            pending += chunk
            while True:
                if need is None:
                    if len(pending) < 8:
                        break
                    stream_id, size = struct.unpack(">BxxxL", pending[:8])
                    del pending[:8]
                    need, sink = size, sinks.get(stream_id, out)
                take = min(need, len(pending))
                if take:
                    assert sink is not None
                    sink.feed(bytes(pending[:take]))
                    del pending[:take]
                    need -= take
                if need == 0:
                    need = None
                    continue
                break
