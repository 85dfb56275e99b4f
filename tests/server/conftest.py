"""Real uvicorn servers on 127.0.0.1, running ``create_app`` in a thread of the test process
(so tests can reach into ``probe_env``'s module state)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import uvicorn

from envhub.server import create_app
from tests.server import probe_env

PROBE = probe_env.ENV_ID




class _ThreadServer:
    def __init__(self, app: Any) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def start(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self.url

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()


@pytest.fixture
def start_server() -> Iterator[Callable[..., str]]:
    """``start_server(envs=..., **create_app_kwargs) -> base URL``; stopped after the test."""
    servers: list[_ThreadServer] = []

    def start(envs: Any = ("calc", PROBE), **kwargs: Any) -> str:
        server = _ThreadServer(create_app(list(envs) if not isinstance(envs, dict) else envs,
                                          **kwargs))
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    """A server with default limits shared by one test module (tests that count metrics or
    need other limits start their own with ``start_server``)."""
    server = _ThreadServer(create_app(["calc", PROBE]))
    yield server.start()
    server.stop()
