"""``RemoteEnvironment`` against a real server: same surface as local, typed errors, retries."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

import envhub
from envhub._util.asgi import ServerThread
from envhub._util.net import bound_socket
from envhub.clients._http_transports import HttpEngine
from envhub.clients._remote_calls import (
    HttpSessionCalls,
    SessionCalls,
    WebSocketSessionCalls,
    WebSocketSessions,
)
from envhub.clients.remote import RemoteEnvironment, RemoteSession
from envhub.errors import (
    CapacityError,
    EnvhubError,
    InvalidRequest,
    RegistryError,
    RemoteError,
    SessionClosed,
    SessionNotFound,
    TaskNotFound,
    Unauthorized,
)
from envhub.protocol import EnvironmentClient, SessionHandle
from envhub.server import create_app
from envhub.types import Health, Message
from tests.server import probe_env

# Every test runs on both HTTP engines of the client.
pytestmark = pytest.mark.parametrize("http", ["aiohttp", "httpx"])


async def test_remote_episode_matches_local(url: str, http: HttpEngine) -> None:
    local = envhub.make("calc")
    task = local.tasks.get("calc-0-00007")
    async with RemoteEnvironment(url, "calc", http=http) as remote:
        assert envhub.RemoteEnvironment is RemoteEnvironment
        assert await remote.task_ids("test") == await local.task_ids("test")
        assert len(await remote.task_ids()) == 3000
        info = await remote.info()
        assert info == await local.info() and remote.version == local.version
        async with remote.open(task.id) as session:
            assert isinstance(remote, EnvironmentClient) and isinstance(session, SessionHandle)
            assert session.task_id == task.id
            assert session.messages == task.prompt
            assert session.tools == local.tools
            for gold in task.gold_actions:
                result = await session.step([{"id": "g", "name": gold.name,
                                              "arguments": gold.arguments}])
            assert result.done and result.reward == 1.0
            assert session.done and session.stop_reason == "terminal_tool"
        assert session.closed
        assert (await session.close()).reward == 1.0  # idempotent
        assert (await session.info()).closed


async def test_step_accepts_toolcall_models_and_request_ids(url: str, http: HttpEngine) -> None:
    async with RemoteEnvironment(url, "probe", http=http) as remote:
        session = await remote.open("probe-1", session_id=f"fixed-id-{http}")
        assert (await remote.open("probe-1", session_id=f"fixed-id-{http}")).start == session.start
        call = envhub.ToolCall(id="t", name="echo", arguments={"text": "hi"})
        first = await session.step([call], request_id="same")
        again = await session.step([call], request_id="same")
        assert first == again
        assert (await session.info()).metrics.turns == 1
        await session.abort()
        assert session.closed


async def test_health_is_parsed_into_its_model(url: str, http: HttpEngine) -> None:
    async with RemoteEnvironment(url, "probe", http=http) as remote:
        before = await remote.health()
        async with remote.open():
            during = await remote.health()
    assert isinstance(during, Health) and during.version == envhub.__version__
    assert during.sessions == before.sessions + 1 and during.max_sessions > during.sessions


async def test_errors_are_typed(start_server: Callable[..., str], http: HttpEngine) -> None:
    url = start_server(max_sessions=1)
    async with RemoteEnvironment(url, "probe", http=http) as remote:
        with pytest.raises(TaskNotFound) as caught:
            await remote.open("probe-99")
        assert caught.value.status == 404  # type: ignore[attr-defined]
        session = await remote.open()
        with pytest.raises(CapacityError):
            await remote.open()
        await session.close()
        with pytest.raises(SessionClosed):
            await session.step([])
        with pytest.raises(InvalidRequest):
            await remote.task_ids("nope")
    async with RemoteEnvironment(url, "nope", http=http) as missing:
        with pytest.raises(RegistryError):
            await missing.open()
    async with RemoteEnvironment(url, "probe", http=http) as remote:
        session = await remote.open()
        with pytest.raises(SessionNotFound):
            await _handle_on(remote, session, "forgotten").step([])
        await session.abort()
    async with RemoteEnvironment(url, "probe", options={"bogus": 1}, http=http) as remote:
        with pytest.raises(InvalidRequest):
            await remote.open()


class QuotaExhausted(EnvhubError):
    """An error class the core has never seen: the client knows it only by its code."""

    code = "quota_exhausted"


class DailyQuotaExhausted(QuotaExhausted):
    """Repeats its parent's code: the parent, the most general class, decodes it."""

    code = "quota_exhausted"


class QuotaEnv(probe_env.ProbeEnv):
    name = "quota"

    async def reset(self, task: envhub.Task) -> list[Message]:
        raise DailyQuotaExhausted("no quota left today")


async def test_an_error_class_defined_anywhere_is_decoded_by_its_code(
    start_server: Callable[..., str], http: HttpEngine
) -> None:
    url = start_server(envs=[f"{__name__}:QuotaEnv"])
    for transport in ("http", "ws") if http == "aiohttp" else ("http",):
        async with RemoteEnvironment(url, "quota", http=http, transport=transport) as remote:
            with pytest.raises(QuotaExhausted) as caught:
                await remote.open()
        assert type(caught.value) is QuotaExhausted, transport
        assert caught.value.message == "no quota left today"
        assert caught.value.status == 500  # type: ignore[attr-defined]


async def test_token(start_server: Callable[..., str], http: HttpEngine) -> None:
    url = start_server(token="tok")
    async with RemoteEnvironment(url, "probe", http=http) as anonymous:
        with pytest.raises(Unauthorized):
            await anonymous.open()
    async with RemoteEnvironment(url, "probe", token="tok", http=http) as remote:
        async with remote.open() as session:
            assert session.task_id.startswith("probe-")


async def test_unreachable_server_is_a_remote_error(http: HttpEngine) -> None:
    with bound_socket() as sock:  # bound, never listening: connections are refused
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        async with RemoteEnvironment(url, "probe", retries=1, backoff_s=0.01, http=http) as remote:
            with pytest.raises(RemoteError) as caught:
                await remote.open()
    assert caught.value.code == "unreachable"


async def test_create_is_retried_until_the_server_comes_up(http: HttpEngine) -> None:
    server = ServerThread(create_app([probe_env.ENV_ID]))  # bound now, serving later
    async with RemoteEnvironment(server.url, "probe", retries=8, backoff_s=0.1,
                                 http=http) as remote:  # fmt: skip
        opening = asyncio.ensure_future(remote.open("probe-0"))  # an awaitable, not a coroutine
        await asyncio.sleep(0.2)  # the first attempts are refused
        assert not opening.done()
        try:
            await asyncio.to_thread(server.start)
            session = await opening
            assert session.task_id == "probe-0"
            await session.close()
        finally:
            await asyncio.to_thread(server.stop, 30)


def _handle_on(remote: RemoteEnvironment, like: RemoteSession, session_id: str
               ) -> RemoteSession:
    """A client handle on ``session_id`` (one the server never saw) through ``remote``."""
    sessions = remote._sessions
    calls: SessionCalls
    if isinstance(sessions, WebSocketSessions):
        calls = WebSocketSessionCalls(sessions, sessions.pool.lease(), session_id)
    else:
        calls = HttpSessionCalls(remote._requests, session_id)
    return RemoteSession(like.start.model_copy(update={"session_id": session_id}), calls,
                         remote.url)
