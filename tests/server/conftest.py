"""Real uvicorn servers on 127.0.0.1, running ``create_app`` in a thread of the test process
(so tests can reach into ``probe_env``'s module state)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from envhub.server import create_app
from envhub.testing import serve_in_thread
from tests.server import probe_env

PROBE = probe_env.ENV_ID


@pytest.fixture
def start_server() -> Iterator[Callable[..., str]]:
    """``start_server(envs=..., **create_app_kwargs) -> base URL``; stopped after the test."""
    with ExitStack() as servers:

        def start(envs: Any = ("calc", PROBE), **kwargs: Any) -> str:
            hosted = list(envs) if not isinstance(envs, dict) else envs
            return servers.enter_context(serve_in_thread(create_app(hosted, **kwargs)))

        yield start


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    """A server with default limits shared by one test module (tests that count metrics or
    need other limits start their own with ``start_server``)."""
    with serve_in_thread(create_app(["calc", PROBE])) as base_url:
        yield base_url
