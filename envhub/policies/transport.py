"""The HTTP side the ``openai`` and ``tito`` policies share: one pooled transport to many
model servers.

:class:`PooledTransport` owns the :class:`~envhub.policies.endpoints.EndpointPool`
(balancing, sticky routing, the per-endpoint cap, ejection and probing), one ``aiohttp``
session per endpoint (``orjson`` bodies; :mod:`envhub.policies.openai_compat` says why
not the ``openai`` SDK or ``httpx``), the headers every request carries (the API key, the
episode's session id, and reading back the server's weight version) and the reading of a
reply: 429 and 5xx, network failures and non-JSON bodies are transient (retried); a 400 or
413 saying the prompt does not fit is :class:`~envhub.errors.ContextLengthExceeded`; any
other 4xx is a :class:`~envhub.errors.PolicyError`. A policy reads its own 4xx cases first
(:data:`ClientErrorHook`). Each failed request is reported to the observer here; what a
reply produced (or a reply the policy cannot read) is the policy's to report.

Weight versions the servers report (recorded per turn in place of the client's
``policy_version``): a response header (``weight_version_header``), read on every reply;
or a field of the model's entry in ``GET /models`` (``weight_version_field``), which
costs a request of its own and so is not read per turn: each endpoint's value is read
once, by the first reply that needs it, and kept until it may be stale, which is when the
attached gate's version changes (the stream sets it once an update loaded the servers, or
the trainer set ``policy_version``) or the endpoint comes back from ejection (a restarted
server). The read happens inside the request's gated call, after the reply and before the
call returns, and no update completes while a call is in flight, so the value read is the
one of the weights that sampled the reply. Without a gate (a plain rollout) the value is
read once per endpoint: a server updated behind envhub's back is seen only through the
header. A ``/models`` read that fails (network, 5xx) records no version for that reply
and is tried again by the next one; a 4xx or a reply without the field is kept as "no
version" like any other read.

:class:`PooledPolicy` is the part of a policy around it: the pool, observer and weight
update gate that the rollout (:mod:`envhub.rollout.metrics`, :mod:`envhub.rollout.stream`)
reaches through the policy.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict

import aiohttp
import orjson

from envhub.errors import ContextLengthExceeded, PolicyError, TransientPolicyError
from envhub.policies.endpoints import Endpoint, EndpointPool, RoutingMode
from envhub.policies.gate import GenerationGate
from envhub.policies.observer import RequestObserver
from envhub.policies.weight_sync import parse_version, reported_version

__all__ = [
    "ClientErrorHook",
    "PooledPolicy",
    "PooledTransport",
    "Reply",
    "TransportOptions",
    "is_context_overflow",
]

ClientErrorHook = Callable[[str, int, str], PolicyError | None]
"""A policy's own reading of a 4xx reply (endpoint URL, status, body text), asked before
the shared one: the error to raise, or ``None`` to read it as usual."""

_CONTEXT_OVERFLOW = re.compile(
    r"context_length_exceeded|maximum context length|context length|maximum model length"
    r"|context size|context window|prompt is too long|exceed_context_size",
    re.IGNORECASE,
)


class TransportOptions(TypedDict, total=False):
    """:class:`PooledTransport`'s connection options, which the policies take as keyword
    arguments and pass on (the defaults are the transport's)."""

    api_key: str | None
    request_timeout_s: float
    endpoint_concurrency: int | None
    eject_after: int
    probe_interval_s: float
    routing: RoutingMode
    sticky_max_outstanding: int | None
    session_header: str | None
    weight_version_header: str | None
    weight_version_field: str | None


@dataclass(frozen=True, slots=True)
class Reply:
    """A successful request: the reply's JSON, the endpoint that answered, the seconds it
    took (from leaving the pool's queue) and the weight version the server reported."""

    data: Any
    endpoint: str
    seconds: float
    version: int | None


class PooledTransport:
    """POSTs JSON bodies to ``base_urls``, load-balanced by an :class:`EndpointPool`.

    ``routing`` and ``sticky_max_outstanding`` are the pool's (episode- or group-sticky
    routing keeps a session's turns on the server that caches its prefix), and
    ``endpoint_concurrency`` caps each endpoint's requests in flight. Every request of a
    session carries its id (:meth:`EndpointPool.session_key`) in ``session_header``
    (``None``: no header), so that a router in front of several servers can keep the
    session on one server too. With ``weight_version_header`` the version a server reports
    in that response header comes back on the :class:`Reply`; without the header, with
    ``weight_version_field`` the version is that field of the entry of ``model`` (or the
    only entry) in the endpoint's ``GET /models`` reply (``{url}/models`` for a URL ending
    in ``/v1``, else ``{url}/v1/models``), cached as the module docstring says. The key is
    ``api_key``, else ``OPENAI_API_KEY``. An ejected endpoint is probed with ``GET
    {url}{probe_path}``.
    """

    def __init__(
        self,
        base_urls: list[str],
        *,
        probe_path: str = "/models",
        api_key: str | None = None,
        request_timeout_s: float = 600.0,
        endpoint_concurrency: int | None = None,
        eject_after: int = 3,
        probe_interval_s: float = 2.0,
        routing: RoutingMode = "least-outstanding",
        sticky_max_outstanding: int | None = None,
        session_header: str | None = "X-Session-ID",
        weight_version_header: str | None = None,
        weight_version_field: str | None = None,
        model: str | None = None,
    ) -> None:
        key = api_key or os.environ.get("OPENAI_API_KEY")
        self._headers = {"content-type": "application/json"}
        if key:
            self._headers["authorization"] = f"Bearer {key}"
        self._timeout = aiohttp.ClientTimeout(
            total=request_timeout_s, sock_connect=min(10.0, request_timeout_s)
        )
        self._connection_limit = endpoint_concurrency or 0  # 0: aiohttp's "unlimited"
        self._sessions: dict[str, aiohttp.ClientSession] = {}
        self._probe_path = probe_path
        self.pool = EndpointPool(
            base_urls,
            self._probe,
            cap=endpoint_concurrency,
            eject_after=eject_after,
            probe_interval_s=probe_interval_s,
            routing=routing,
            sticky_max_outstanding=sticky_max_outstanding,
        )
        self.session_header = session_header or None
        self.weight_version_header = weight_version_header or None
        self.weight_version_field = weight_version_field or None
        self.model = model
        self.version_epoch: Callable[[], object] = lambda: None
        """When its value changes, the ``/models`` versions read before are stale (the
        policy sets it to its gate's version)."""
        self._served: dict[str, tuple[object, asyncio.Task[tuple[bool, int | None]]]] = {}
        self.observer: RequestObserver | None = None

    def observe(self, observer: RequestObserver | None) -> None:
        """Report every failed request and every ejected endpoint to ``observer``."""
        self.observer = observer
        self.pool.on_eject = None if observer is None else observer.endpoint_ejected

    async def post(
        self,
        path: str,
        body: dict[str, Any],
        session_id: str | None,
        *,
        client_error: ClientErrorHook | None = None,
    ) -> Reply:
        """POST ``body`` to ``path`` on the pool's endpoint for ``session_id``; raises the
        typed error the reply means (module docs), after asking ``client_error`` about a
        4xx, and reports it to the observer."""
        payload = orjson.dumps(body)
        headers = None
        if self.session_header is not None and session_id is not None:
            headers = {self.session_header: session_id}
        endpoint = await self.pool.acquire(session_id)
        url = endpoint.url
        started = time.perf_counter()
        try:
            status, content, version = await self._exchange(endpoint, path, payload, headers)
            data = _read_reply(url, status, content, client_error)
        except PolicyError as exc:
            if self.observer is not None:
                self.observer.request_failed(url, time.perf_counter() - started, _kind(exc))
            raise
        seconds = time.perf_counter() - started
        if version is None and self.weight_version_field is not None:
            version = await self.served_version(url)
        return Reply(data, url, seconds, version)

    async def served_version(self, url: str) -> int | None:
        """The version endpoint ``url`` serves per its ``/models`` field (module docs):
        the cached read while it is fresh, else one new read that concurrent callers
        share; ``None`` when the field is missing or not an integer, or the read failed
        (then the next call reads again)."""
        epoch = self.version_epoch()
        entry = self._served.get(url)
        if entry is None or entry[0] != epoch:
            entry = (epoch, asyncio.ensure_future(self._read_served_version(url)))
            self._served[url] = entry
        # shielded: a cancelled caller does not cancel the read the others wait for
        read, version = await asyncio.shield(entry[1])
        if not read and self._served.get(url) is entry:
            del self._served[url]
        return version

    async def _read_served_version(self, url: str) -> tuple[bool, int | None]:
        """``GET /models`` on ``url``: whether it answered, and the version field of the
        model's entry (``model``'s, or the only one)."""
        models_url = f"{url}/models" if url.endswith("/v1") else f"{url}/v1/models"
        try:
            async with self._session(url).get(
                models_url, timeout=aiohttp.ClientTimeout(total=10)
            ) as response:
                if response.status >= 500:  # transient: the next reply reads again
                    return False, None
                if response.status >= 400:  # no /models here: no version to read
                    return True, None
                data = orjson.loads(await response.read())
        except (aiohttp.ClientError, asyncio.TimeoutError, orjson.JSONDecodeError):
            return False, None
        entries = data.get("data") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            return True, None
        models = [e for e in entries if isinstance(e, dict)]
        entry = next((e for e in models if e.get("id") == self.model), None)
        if entry is None and len(models) == 1:
            entry = models[0]
        field = self.weight_version_field
        return True, parse_version(entry.get(field)) if entry is not None and field else None

    async def _exchange(
        self, endpoint: Endpoint, path: str, payload: bytes, headers: dict[str, str] | None
    ) -> tuple[int, bytes, int | None]:
        """One request to ``endpoint``, which the pool gave out and gets back here."""
        connection_failed = False
        try:
            async with self._session(endpoint.url).post(
                f"{endpoint.url}{path}", data=payload, headers=headers
            ) as response:
                content = await response.read()
                version = reported_version(response.headers, self.weight_version_header)
                return response.status, content, version
        except asyncio.TimeoutError as exc:
            connection_failed = True
            raise TransientPolicyError(f"{endpoint.url}: timed out") from exc
        except aiohttp.ClientError as exc:
            connection_failed = True
            raise TransientPolicyError(f"{endpoint.url}: {type(exc).__name__}: {exc}") from exc
        finally:
            self.pool.release(endpoint, connection_failed=connection_failed)

    def _session(self, url: str) -> aiohttp.ClientSession:
        """The endpoint's pooled session, created inside the running event loop."""
        session = self._sessions.get(url)
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(limit=self._connection_limit, limit_per_host=0)
            session = aiohttp.ClientSession(
                connector=connector, headers=self._headers, timeout=self._timeout
            )
            self._sessions[url] = session
        return session

    async def unreachable(self, url: str) -> str | None:
        """Why the endpoint ``url`` did not answer ``GET {url}{probe_path}`` within 5
        seconds (refused, timed out, a 5xx), or ``None`` when it answered (any status
        below 500: a 401 or 404 is a server that is up)."""
        probe = f"{url}{self._probe_path}"
        try:
            async with self._session(url).get(
                probe, timeout=aiohttp.ClientTimeout(total=5)
            ) as response:
                status = response.status
        except asyncio.TimeoutError:
            return f"GET {probe}: no answer in 5 s"
        except aiohttp.ClientConnectorError as exc:  # "Connection refused", not aiohttp's repr
            reason = os.strerror(exc.errno) if exc.errno and exc.errno > 0 else str(exc)
            return f"GET {probe}: {reason}"
        except aiohttp.ClientError as exc:
            return f"GET {probe}: {type(exc).__name__}: {exc}"
        return f"GET {probe}: HTTP {status}" if status >= 500 else None

    async def _probe(self, url: str) -> bool:
        """Whether an ejected endpoint answers again (:meth:`unreachable`)."""
        answered = await self.unreachable(url) is None
        if answered:  # it may have restarted with other weights: read its version again
            self._served.pop(url, None)
        return answered

    async def aclose(self) -> None:
        await self.pool.aclose()
        for _, read in self._served.values():
            read.cancel()
        self._served.clear()
        for session in self._sessions.values():
            await session.close()
        self._sessions.clear()


class PooledPolicy:
    """The base of a policy that sends through a :class:`PooledTransport` (``transport``):
    its ``pool``, ``observer`` (:class:`~envhub.policies.observer.ObservablePolicy`) and
    the ``gate`` a weight-update stream attaches
    (:class:`~envhub.policies.gate.GateAware`)."""

    def __init__(
        self,
        base_urls: list[str],
        probe_path: str,
        options: TransportOptions,
        *,
        model: str | None = None,
    ) -> None:
        self.transport = PooledTransport(base_urls, probe_path=probe_path, model=model, **options)
        self.pool = self.transport.pool
        self.gate: GenerationGate | None = None

    @property
    def observer(self) -> RequestObserver | None:
        return self.transport.observer

    @property
    def session_header(self) -> str | None:
        return self.transport.session_header

    @property
    def weight_version_header(self) -> str | None:
        return self.transport.weight_version_header

    @property
    def weight_version_field(self) -> str | None:
        return self.transport.weight_version_field

    def observe(self, observer: RequestObserver | None) -> None:
        """Report every request and every ejected endpoint to ``observer`` (``None``:
        stop; :class:`~envhub.policies.observer.ObservablePolicy`)."""
        self.transport.observe(observer)

    def attach_gate(self, gate: GenerationGate | None) -> None:
        """Send every request through ``gate`` (a stream's, during weight updates). Its
        version also tells the transport when the ``/models`` versions it read are stale:
        a change means the servers were updated (module docstring)."""
        self.gate = gate
        self.transport.version_epoch = (lambda: None) if gate is None else (lambda: gate.version)

    async def check_servers(self) -> None:
        """:class:`~envhub.policies.base.ServerBacked`: a :class:`PolicyError` naming each
        base URL and why, when none of them answers. One that is down among others that
        answer is left to the pool, which ejects it and probes it until it is back."""
        urls = [endpoint.url for endpoint in self.pool.endpoints]
        reasons = await asyncio.gather(*(self.transport.unreachable(url) for url in urls))
        if all(reasons):
            down = "; ".join(f"{url} ({why})" for url, why in zip(urls, reasons, strict=True))
            raise PolicyError(f"no model server answers at {down}: start it, or fix --base-url")

    async def aclose(self) -> None:
        await self.transport.aclose()


def is_context_overflow(error_text: str) -> bool:
    """Whether a model server's 400 says the prompt (plus ``max_tokens``) is too long (each
    server words it its own way: this knows vLLM's, SGLang's, llama.cpp's and OpenAI's)."""
    return _CONTEXT_OVERFLOW.search(error_text) is not None


def _read_reply(url: str, status: int, content: bytes, client_error: ClientErrorHook | None) -> Any:
    """The reply's JSON, or the typed error its status means (module docs)."""
    if status == 429 or status >= 500:
        raise TransientPolicyError(f"{url}: HTTP {status}: {content[:200]!r}")
    text = content.decode(errors="replace")
    if status >= 400 and client_error is not None:
        error = client_error(url, status, text)
        if error is not None:
            raise error
    if status in (400, 413) and is_context_overflow(text):
        raise ContextLengthExceeded(f"{url}: HTTP {status}: {text[:500]}")
    if status >= 400:
        raise PolicyError(f"{url}: HTTP {status}: {text[:500]}")
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError as exc:
        raise TransientPolicyError(f"{url}: reply is not JSON: {exc}") from exc


def _kind(error: PolicyError) -> str:
    """A failed request's kind for observers: the network's, else the error's code."""
    if isinstance(error.__cause__, asyncio.TimeoutError):
        return "timeout"
    if isinstance(error.__cause__, aiohttp.ClientError):
        return "connection"
    return error.code
