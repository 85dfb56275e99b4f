"""Throughput of ``envhub serve`` driven by ``RemoteEnvironment``.

A one-worker uvicorn server hosting ``calc`` runs in a subprocess (``envhub serve``);
this process drives C concurrent sessions, each looping episodes of create + N steps
(``calculate "1+1"``) + close until the duration is spent. For each C it prints
steps/s, p50/p99 step latency, errors and the server's peak RSS, then two ratios:

* against 2,200 steps/s, OpenEnv 0.10's figure at C=256 over its WebSocket transport
  with one uvicorn worker (the issue's figure; ``openenv_baseline.py`` measures OpenEnv
  side by side on this machine);
* against the same episodes run in-process through ``LocalEnvironment`` in this run,
  which shows what the HTTP transport costs;
* with ``--floor``, against the transport floor in this run: the same uvicorn stack with
  no application (``_floor_server.py``: orjson parses each message, a canned reply of a
  real one's size answers it), driven by the same client at the same C. Its steps/s
  ratio, and the floor's server CPU per step over the door's, show what envhub's own
  step path costs above what any server on this stack pays.

``--client lean`` drives both with a load generator instead of ``RemoteEnvironment``:
pre-encoded messages over aiohttp, one socket per worker, replies checked for an error
but not parsed (bench/limit-style), so that the client's CPU bounds the rate less.

    python benchmarks/server_throughput.py --concurrency 64 256 1024 4096 --duration 10
    python benchmarks/server_throughput.py --concurrency 256 --transport ws --floor --client lean
    python benchmarks/server_throughput.py --concurrency 256 4096 --transport ws
    python benchmarks/server_throughput.py --concurrency 256 4096 --transport ws --gc-threshold 0
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from _load import CALL, cpu_per_step, cpu_seconds, drive, peak_rss_mib, report

import envhub
from envhub._util.gc_tuning import DEFAULT_GC_THRESHOLD
from envhub._util.net import free_port, wait_for_http
from envhub.clients.remote import RemoteEnvironment, SessionTransport
from envhub.rollout.runtime import run_async
from envhub.server import raise_open_files_limit

OPENENV_STEPS_PER_S = 2200.0
FLOOR_SERVER = Path(__file__).with_name("_floor_server.py")


def start_server(port: int, max_turns: int, max_sessions: int,
                 gc_threshold: int = DEFAULT_GC_THRESHOLD) -> subprocess.Popen[bytes]:
    cli = "import envhub.cli.serve; from envhub.cli._app import app; app()"
    command = [sys.executable, "-c", cli,
               "serve", "calc", "--port", str(port), "--max-turns", str(max_turns),
               # a loaded machine must not end episodes by calc's 120 s wall clock
               "--episode-timeout", "86400",
               "--max-sessions", str(max_sessions), "--log-level", "warning",
               "--gc-threshold", str(gc_threshold)]
    proc = subprocess.Popen(command, env={**os.environ, "ENVHUB_TOKEN": ""})
    return wait_healthy(proc, f"http://127.0.0.1:{port}/health")


def wait_healthy(proc: subprocess.Popen[bytes], url: str) -> subprocess.Popen[bytes]:
    """Return ``proc`` once ``url`` answers 200; kill it and exit after 60 s."""
    if wait_for_http(url, timeout_s=60, gone=lambda: proc.poll() is not None, interval_s=0.2):
        return proc
    proc.kill()
    raise SystemExit(f"server did not start: {proc.args}")


@contextlib.asynccontextmanager
async def serving(steps: int, max_sessions: int, transport: SessionTransport = "http",
                  gc_threshold: int = DEFAULT_GC_THRESHOLD,
                  ) -> AsyncIterator[tuple[RemoteEnvironment, subprocess.Popen[bytes]]]:
    """``envhub serve calc`` in a subprocess and a client sized for ``max_sessions``,
    stepping over ``transport`` (HTTP requests, or pooled WebSockets: ``/v1/ws``)."""
    port = free_port()
    server = start_server(port, max_turns=steps + 2, max_sessions=max_sessions,
                          gc_threshold=gc_threshold)
    remote = RemoteEnvironment(f"http://127.0.0.1:{port}", "calc",
                               max_connections=max_sessions, timeout=300.0,
                               transport=transport)
    try:
        yield remote, server
    finally:
        await remote.aclose()
        server.terminate()
        server.wait(timeout=30)


async def real_replies(steps: int) -> dict[str, Any]:
    """The create, step and close bodies of one in-process ``calc`` episode: what the
    floor answers, so that its replies are as long as the door's."""
    session = envhub.make("calc", max_turns=steps + 2).new_session("calc-0-00000")
    replies = {"create": await session.reset(), "step": await session.step(CALL),
               "close": await session.close()}
    return {op: body.model_dump(mode="json") for op, body in replies.items()}


@contextlib.contextmanager
def floor_serving(replies: dict[str, Any]) -> Any:
    """``_floor_server.py`` answering with ``replies`` in a subprocess; yields
    ``(url, process)``."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(FLOOR_SERVER), str(port), json.dumps(replies)])
    wait_healthy(proc, f"http://127.0.0.1:{port}/health")
    try:
        yield f"http://127.0.0.1:{port}", proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


class LeanClient:
    """A load generator for both envhub and the floor: the session calls as pre-encoded
    JSON over aiohttp (a pooled socket per session on ``ws``), a reply checked for an
    error but not parsed, except create's for the session id."""

    def __init__(self, url: str, transport: SessionTransport, connections: int) -> None:
        self.url, self.transport = url, transport
        self.http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=connections))
        self.sockets: list[aiohttp.ClientWebSocketResponse] = []
        self.step_body = json.dumps({"tool_calls": CALL}).encode()

    async def open(self, task_id: str) -> LeanSession:
        create = {"env": "calc", "task_id": task_id}
        if self.transport == "http":
            reply = await self._post("/v1/sessions", json.dumps(create).encode())
            return LeanSession(self, json.loads(reply)["session_id"], None)
        socket = self.sockets.pop() if self.sockets else await self.http.ws_connect(
            f"{self.url}/v1/ws", max_msg_size=0)
        reply = await self._exchange(socket, json.dumps({"op": "create", **create}))
        return LeanSession(self, json.loads(reply)["session_id"], socket)

    async def _post(self, path: str, body: bytes) -> bytes:
        async with self.http.post(self.url + path, data=body,
                                  headers={"content-type": "application/json"}) as response:
            reply = await response.read()
            if response.status != 200:
                raise RuntimeError(f"{path}: {response.status} {reply[:200]!r}")
            return reply

    @staticmethod
    async def _exchange(socket: aiohttp.ClientWebSocketResponse, message: str) -> str:
        await socket.send_str(message)
        reply = await socket.receive_str()
        if reply.startswith('{"error":'):
            raise RuntimeError(reply[:200])
        return reply

    async def aclose(self) -> None:
        for socket in self.sockets:
            await socket.close()
        await self.http.close()


class LeanSession:
    def __init__(self, client: LeanClient, session_id: str,
                 socket: aiohttp.ClientWebSocketResponse | None) -> None:
        self.client, self.session_id, self.socket = client, session_id, socket
        if socket is not None:
            self.step_message = json.dumps({"op": "step", "session_id": session_id,
                                            "tool_calls": CALL})

    async def step(self, _calls: Any) -> None:
        if self.socket is None:
            await self.client._post(f"/v1/sessions/{self.session_id}/step",
                                    self.client.step_body)
        else:
            await self.client._exchange(self.socket, self.step_message)

    async def close(self) -> None:
        if self.socket is None:
            await self.client._post(f"/v1/sessions/{self.session_id}/close", b"")
            return
        await self.client._exchange(self.socket, json.dumps(
            {"op": "close", "session_id": self.session_id}))
        self.client.sockets.append(self.socket)


async def measure(label: str, url: str, pid: int, client: str, transport: SessionTransport,
                  c: int, steps: int, duration: float,
                  remote: RemoteEnvironment | None = None) -> tuple[float, float]:
    """Drive the server at ``url`` (process ``pid``) at concurrency ``c``; print its line
    and return (steps/s, server CPU ms per step)."""
    lean = LeanClient(url, transport, c) if client == "lean" else None
    own = None  # a RemoteEnvironment made here for this server, closed here
    if remote is None and lean is None:
        remote = own = RemoteEnvironment(url, "calc", max_connections=c, timeout=300.0,
                                         transport=transport)
    opener = lean.open if lean is not None else remote.open  # type: ignore[union-attr]
    try:
        server_cpu, client_cpu = cpu_seconds(pid), time.process_time()
        run, elapsed = await drive(opener, c, steps, duration)
        server_cpu = cpu_seconds(pid) - server_cpu
        client_cpu = time.process_time() - client_cpu
    finally:
        for opened in (lean, own):
            if opened is not None:
                await opened.aclose()
    rate = report(label, c, run, elapsed, f"server peak RSS={peak_rss_mib(pid):.0f} MiB")
    print(cpu_per_step(server_cpu, client_cpu, run.steps))
    return rate, server_cpu * 1000 / max(run.steps, 1)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256, 1024, 4096])
    parser.add_argument("--steps", type=int, default=10, help="steps per episode")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per level")
    parser.add_argument("--transport", choices=["http", "ws"], default="http",
                        help="step over HTTP requests or pooled WebSockets (/v1/ws)")
    parser.add_argument("--skip-local", action="store_true", help="skip the in-process baseline")
    parser.add_argument("--gc-threshold", type=int, default=DEFAULT_GC_THRESHOLD,
                        help="the server's --gc-threshold (0: Python's default collector)")
    parser.add_argument("--floor", action="store_true",
                        help="also measure the transport floor (_floor_server.py) at each C")
    parser.add_argument("--client", choices=["remote", "lean"], default="remote",
                        help="RemoteEnvironment, or a pre-encoded load generator (lean)")
    args = parser.parse_args()

    raise_open_files_limit()
    load = os.getloadavg()[0]
    loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
    print(f"load average {load:.1f} on {os.cpu_count()} CPUs (the figures share the machine); "
          f"client loop: {loop}", flush=True)
    local = envhub.make("calc", max_turns=args.steps + 2)
    async with serving(args.steps, max(args.concurrency), args.transport,
                       args.gc_threshold) as (remote, server), contextlib.AsyncExitStack() as stack:
        floor_url, floor_server = (None, None)
        if args.floor:
            replies = await real_replies(args.steps)
            floor_url, floor_server = stack.enter_context(floor_serving(replies))
        for c in args.concurrency:
            rate, server_ms = await measure(
                args.transport, remote.url, server.pid, args.client, args.transport,
                c, args.steps, args.duration, remote if args.client == "remote" else None)
            print(f"           ratio to OpenEnv's 2,200 steps/s: {rate / OPENENV_STEPS_PER_S:.2f}")
            if floor_server is not None:
                floor_rate, floor_ms = await measure(
                    f"floor-{args.transport}", floor_url, floor_server.pid, args.client,
                    args.transport, c, args.steps, args.duration)
                print(f"           ratio {args.transport} / floor: steps/s "
                      f"{rate / floor_rate:.2f}, server CPU per step "
                      f"floor/{args.transport} {floor_ms / server_ms:.2f}", flush=True)
            if not args.skip_local:
                run, elapsed = await drive(local.open, c, args.steps, args.duration)
                local_rate = report("in-process", c, run, elapsed, "")
                print(f"           ratio {args.transport} / in-process: {rate / local_rate:.2f}")


if __name__ == "__main__":
    run_async(main())  # uvloop when installed, as `envhub rollout` runs (less CPU per request)
