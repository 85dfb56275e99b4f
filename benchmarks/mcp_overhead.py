"""What the MCP door costs: calc steps through ``/mcp/calc`` against the native WebSocket API.

One ``envhub serve calc --mcp`` (one uvicorn worker, a subprocess) serves both doors. For
each concurrency C this process drives C concurrent sessions, each looping episodes of
open + N steps (``calculate "1+1"``) + close until the duration is spent, first through
``envhub.RemoteEnvironment`` over pooled WebSockets (``/v1/ws``, the baseline), then as
MCP clients (the official SDK's ``ClientSession`` over Streamable HTTP, JSON responses, one
``tools/call`` per step, an ``initialize`` + ``DELETE`` per episode), then the same MCP
requests as bare JSON-RPC over aiohttp (``mcp-raw``: the endpoint's cost without the SDK
client's; bodies encoded and read with orjson), and prints steps/s, p50/p99 step
latency, CPU per step on each side and the ratios to the WebSocket run (steps/s, p99,
server CPU per step).

A step through MCP is a JSON-RPC request in an HTTP POST (headers, session lookup, the
JSON-RPC envelope; the door's lean path answers the handshake and ``tools/call`` itself,
the SDK the rest) where the WebSocket API sends one small frame; the server-side
CPU per step bounds the server's throughput, the client's the driver's (both are
printed).

    python benchmarks/mcp_overhead.py --concurrency 1 32 --steps 10 --duration 5
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx2
import orjson
from _load import cpu_per_step, cpu_seconds, drive, report
from mcp.client import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS
from server_throughput import wait_healthy

from envhub._util.net import free_port
from envhub.clients.remote import RemoteEnvironment
from envhub.rollout.runtime import run_async


class McpEpisode:
    """One MCP session as the load loop's session: ``step`` is one ``tools/call`` per call."""

    def __init__(self, stack: contextlib.AsyncExitStack, session: ClientSession) -> None:
        self.stack = stack
        self.session = session

    @classmethod
    async def open(cls, http: httpx2.AsyncClient, url: str) -> McpEpisode:
        stack = contextlib.AsyncExitStack()
        try:
            read, write = await stack.enter_async_context(
                streamable_http_client(url, http_client=http))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
        except BaseException:
            await stack.aclose()
            raise
        return cls(stack, session)

    async def step(self, calls: list[dict[str, Any]]) -> None:
        for call in calls:
            result = await self.session.call_tool(call["name"], json.loads(call["arguments"]))
            if result.is_error:
                raise RuntimeError(f"tool error: {result.content}")

    async def close(self) -> None:
        await self.stack.aclose()  # DELETE: the server closes (scores) the envhub session


def start_server(port: int, steps: int) -> subprocess.Popen[bytes]:
    cli = "import envhub.cli.serve; from envhub.cli._app import app; app()"
    command = [sys.executable, "-c", cli, "serve", "calc", "--mcp", "--port", str(port),
               "--max-turns", str(steps + 2), "--episode-timeout", "86400",
               "--log-level", "warning"]
    proc = subprocess.Popen(command, env={**os.environ, "ENVHUB_TOKEN": ""})
    return wait_healthy(proc, f"http://127.0.0.1:{port}/health")


class RawMcpEpisode:
    """The same MCP session spoken as bare JSON-RPC over one aiohttp connection pool: what
    the endpoint costs without the SDK client's own CPU (the server-side bound)."""

    def __init__(self, http: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> None:
        self.http, self.url, self.headers = http, url, headers
        self.ids = itertools.count(2)

    @classmethod
    async def open(cls, http: aiohttp.ClientSession, url: str) -> RawMcpEpisode:
        headers = {"Accept": "application/json, text/event-stream",
                   "Content-Type": "application/json"}
        async with http.post(url, json=INITIALIZE, headers=headers) as answer:
            answer.raise_for_status()
            await answer.read()
            headers["Mcp-Session-Id"] = answer.headers["Mcp-Session-Id"]
        headers["Mcp-Protocol-Version"] = HANDSHAKE_PROTOCOL_VERSIONS[-1]
        async with http.post(url, json=INITIALIZED, headers=headers) as answer:
            answer.raise_for_status()
        return cls(http, url, headers)

    async def step(self, calls: list[dict[str, Any]]) -> None:
        for call in calls:
            request = {"jsonrpc": "2.0", "id": next(self.ids), "method": "tools/call",
                       "params": {"name": call["name"],
                                  "arguments": orjson.loads(call["arguments"])}}
            async with self.http.post(self.url, data=orjson.dumps(request),
                                      headers=self.headers) as answer:
                reply = orjson.loads(await answer.read())
            if "error" in reply or reply["result"].get("isError"):
                raise RuntimeError(f"tool error: {reply}")

    async def close(self) -> None:
        async with self.http.delete(self.url, headers=self.headers) as answer:
            answer.raise_for_status()


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": HANDSHAKE_PROTOCOL_VERSIONS[-1], "capabilities": {},
                         "clientInfo": {"name": "mcp_overhead", "version": "0"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


@contextlib.asynccontextmanager
async def serving(steps: int) -> AsyncIterator[tuple[str, subprocess.Popen[bytes]]]:
    """``envhub serve calc --mcp`` in a subprocess: both doors on one server."""
    port = free_port()
    proc = start_server(port, steps)
    try:
        yield f"http://127.0.0.1:{port}", proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32, 128])
    parser.add_argument("--steps", type=int, default=10, help="steps per episode")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per level")
    parser.add_argument("--doors", nargs="+", default=["ws", "mcp", "mcp-raw"],
                        choices=["ws", "mcp", "mcp-raw"],
                        help="which clients to drive (ws is the baseline of the ratios)")
    args = parser.parse_args()

    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs "
          "(the figures share the machine)", flush=True)
    limits = httpx2.Limits(max_connections=None, max_keepalive_connections=None)
    async with (
        serving(args.steps) as (url, server),
        RemoteEnvironment(url, "calc", transport="ws", timeout=300.0) as remote,
        httpx2.AsyncClient(limits=limits, timeout=httpx2.Timeout(300.0)) as http,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as raw,
    ):
        async def open_mcp(task_id: str) -> McpEpisode:
            return await McpEpisode.open(http, f"{url}/mcp/calc?task_id={task_id}")

        async def open_raw(task_id: str) -> RawMcpEpisode:
            return await RawMcpEpisode.open(raw, f"{url}/mcp/calc?task_id={task_id}")

        doors = {"ws": remote.open, "mcp": open_mcp, "mcp-raw": open_raw}
        for c in args.concurrency:
            rates, p99s, server_ms = {}, {}, {}
            for label in dict.fromkeys(["ws", *args.doors]):
                open_session = doors[label]
                server_cpu, client_cpu = cpu_seconds(server.pid), time.process_time()
                run, elapsed = await drive(open_session, c, args.steps, args.duration)
                server_cpu = cpu_seconds(server.pid) - server_cpu
                client_cpu = time.process_time() - client_cpu
                rates[label] = report(label, c, run, elapsed, "")
                lat = sorted(run.latencies) or [float("nan")]
                p99s[label] = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
                server_ms[label] = server_cpu / max(run.steps, 1)
                print(cpu_per_step(server_cpu, client_cpu, run.steps), flush=True)
            for label in [label for label in rates if label != "ws"]:
                print(f"           {label} / ws: steps/s {rates[label] / rates['ws']:.2f}, "
                      f"p99 {p99s[label] / p99s['ws']:.2f}, "
                      f"server CPU per step {server_ms[label] / server_ms['ws']:.2f}",
                      flush=True)


if __name__ == "__main__":
    run_async(main())  # uvloop when installed, as the other load benchmarks run
