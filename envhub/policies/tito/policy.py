"""The ``tito`` policy: token-in/token-out episodes, so the trainer gets the exact sequence.

A chat endpoint tokenises each turn's rendered chat itself, and re-rendering history
can tokenise earlier turns differently from what the model sampled ("token drift"). This
policy never lets that happen: it renders the first prompt once with the model's chat
template (:class:`~envhub.policies.tito.render.ChatRenderer`), sends token ids to a
completion endpoint (:mod:`envhub.policies.tito.backends`: llama.cpp, vLLM, SGLang),
and builds each later prompt as the previous prompt + the sampled ids + the ids of the
new messages. Every turn's prompt therefore starts with the previous turn's prompt and
completion (``prefix_ok`` is true by construction, and the rollout checks it), and the
trainer reads the ids as recorded.

Tool calls are parsed from the decoded completion by a named parser
(:mod:`envhub.toolcalls`, ``hermes`` by default); a malformed call is passed on verbatim
and the session answers it with an error observation, as for any policy.

An episode's ids live in the policy between its turns, keyed by
:attr:`~envhub.policies.base.GenerateRequest.episode_id`; the ``max_episodes`` most
recently active episodes are kept, and a later turn of one that was dropped fails with
a :class:`~envhub.errors.PolicyError` (the trajectory is masked, nothing drifts). A turn
offered other tools than the episode started with (a user turn changed them) renders its
prompt afresh, since templates put the tools at the top: that turn's ``prefix_ok`` is
false and trainers start a new row there.

Requests go through an :class:`~envhub.policies.endpoints.EndpointPool` (balancing,
sticky routing, ejection) with the session id header, as in
:class:`~envhub.policies.openai_compat.OpenAIPolicy`; all of them leave through
:meth:`TitoPolicy._send`.

Weight updates (:mod:`envhub.policies.gate`): a stream attaches its gate; a request an
``abort-and-resume`` update ends early continues on the new weights from the prompt plus
the ids sampled so far (with ``max_tokens`` reduced by them), and since tool calls are
parsed from the whole joined completion, a call the abort cut in two is read whole. With
``weight_version_header`` the version a server reports there is recorded per turn (per
token when an update split it). Without a gate, an aborted reply is retried from scratch.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from envhub.errors import ContextLengthExceeded, PolicyError, TransientPolicyError
from envhub.policies.base import Completion, GenerateRequest, SamplingParams
from envhub.policies.endpoints import EndpointPool, RoutingMode
from envhub.policies.gate import GenerationGate, gated
from envhub.policies.observer import RequestObserver
from envhub.policies.openai_compat import is_context_overflow
from envhub.policies.partial import ABORTED, until_complete
from envhub.policies.retry import RetryPolicy
from envhub.policies.tito.backends import TitoBackend, tito_backend
from envhub.policies.tito.render import ChatRenderer
from envhub.policies.weight_sync import reported_version
from envhub.toolcalls import ToolParser, tool_parser
from envhub.trainers.token_policy import Sample
from envhub.types import Message

__all__ = ["TitoPolicy"]

_PROBE_PATHS = {"llama.cpp": "/health", "sglang": "/health"}  # others: GET /models


@dataclass(slots=True)
class _Episode:
    """What an episode's next prompt extends: the last prompt + completion ids, the
    completion alone, how many messages they cover, and the tools of the first prompt."""

    ids: list[int]
    completion_ids: list[int]
    covered: int
    tools: list[dict[str, Any]]


class TitoPolicy:
    """Token-in/token-out generation against ``base_urls`` of one ``backend`` kind
    (llama.cpp and SGLang: the server's root URL; vLLM: its ``/v1`` URL).

    ``tokenizer`` is a ``transformers`` tokenizer with the model's chat template
    (:func:`envhub.tokenizers.load_tokenizer` reads one from a directory or a GGUF
    file). ``tool_parser`` is a registered parser name or a parser. The pool options are
    :class:`~envhub.policies.openai_compat.OpenAIPolicy`'s.
    """

    def __init__(
        self,
        model: str,
        base_urls: list[str],
        tokenizer: Any,
        *,
        backend: str | TitoBackend = "llama.cpp",
        tool_parser: str | ToolParser = "hermes",
        sampling: SamplingParams | None = None,
        api_key: str | None = None,
        request_timeout_s: float = 600.0,
        retry: RetryPolicy | None = None,
        endpoint_concurrency: int | None = None,
        eject_after: int = 3,
        probe_interval_s: float = 2.0,
        routing: RoutingMode = "least-outstanding",
        sticky_max_outstanding: int | None = None,
        session_header: str | None = "X-Session-ID",
        max_episodes: int = 16384,
        weight_version_header: str | None = None,
    ) -> None:
        self.model = model
        self.renderer = ChatRenderer(tokenizer)
        self.backend = tito_backend(backend) if isinstance(backend, str) else backend
        self.parse_tools = _tool_parser(tool_parser)
        self.sampling = sampling or SamplingParams()
        self.retry = retry or RetryPolicy()
        self.max_episodes = max_episodes
        key = api_key or os.environ.get("OPENAI_API_KEY")
        self._headers = {"content-type": "application/json"}
        if key:
            self._headers["authorization"] = f"Bearer {key}"
        self._timeout = aiohttp.ClientTimeout(
            total=request_timeout_s, sock_connect=min(10.0, request_timeout_s)
        )
        self._connection_limit = endpoint_concurrency or 0
        self._sessions: dict[str, aiohttp.ClientSession] = {}
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
        self.gate: GenerationGate | None = None
        self.observer: RequestObserver | None = None
        self._episodes: OrderedDict[str, _Episode] = OrderedDict()

    def observe(self, observer: RequestObserver | None) -> None:
        """Report every request and ejected endpoint to ``observer`` (``None``: stop)."""
        self.observer = observer
        self.pool.on_eject = None if observer is None else observer.endpoint_ejected

    async def generate(self, request: GenerateRequest) -> Completion:
        if request.episode_id is None:
            raise PolicyError("the tito policy needs each request's episode_id")
        prompt_ids = self._prompt_ids(request)
        session_id = self.pool.session_key(request.episode_id, request.group_id)
        seconds = 0.0

        async def segment(partial: list[Completion]) -> tuple[dict[str, Any], Completion]:
            """One request continuing ``partial`` (the segments an update cut short)."""
            nonlocal seconds
            done = [t for s in partial for t in s.completion_token_ids or []]
            body = self.backend.body(self.model, prompt_ids + done, self._sampling(len(done)))
            data, endpoint, took, version = await self.retry.call(
                lambda: gated(self.gate, lambda: self._send(body, session_id))
            )
            seconds += took
            sample: Sample = self.backend.parse(data)
            if sample.aborted and self.gate is None:  # no update to wait for: ask again
                raise TransientPolicyError(f"{endpoint}: the server aborted the request")
            reason = ABORTED if sample.aborted else ("stop" if sample.finished else "length")
            return data, Completion(
                content=None,
                tool_calls=[],
                finish_reason=reason,
                completion_token_ids=list(sample.token_ids),
                completion_logprobs=sample.logprobs,
                endpoint=endpoint,
                weight_version=version,
            )

        _, sampled = await until_complete(self.gate, segment)
        ids = sampled.completion_token_ids or []
        self._remember(request, prompt_ids, ids)
        parsed = self.parse_tools(self.renderer.decode(ids))
        for index, call in enumerate(parsed.tool_calls):
            call.id = f"call_{request.turn}_{index}"
        if sampled.finish_reason == "length":
            finish_reason = "length"
        else:
            finish_reason = "tool_calls" if parsed.tool_calls else "stop"
        completion = Completion(
            content=parsed.content,
            tool_calls=parsed.tool_calls,
            finish_reason=finish_reason,
            prompt_token_ids=prompt_ids,
            completion_token_ids=ids,
            completion_logprobs=sampled.completion_logprobs,
            prompt_tokens=len(prompt_ids),
            completion_tokens=len(ids),
            endpoint=sampled.endpoint,
            weight_version=sampled.weight_version,
            completion_versions=sampled.completion_versions,
        )
        if self.observer is not None and sampled.endpoint is not None:
            self.observer.request_done(sampled.endpoint, seconds, completion)
        return completion

    def attach_gate(self, gate: GenerationGate | None) -> None:
        """Send every request through ``gate`` (a stream's, during weight updates)."""
        self.gate = gate

    def _sampling(self, done: int) -> SamplingParams:
        """The sampling parameters of a request continuing ``done`` sampled ids."""
        if not done or self.sampling.max_tokens is None:
            return self.sampling
        left = max(1, self.sampling.max_tokens - done)
        return dataclasses.replace(self.sampling, max_tokens=left)

    def _prompt_ids(self, request: GenerateRequest) -> list[int]:
        """The first turn's rendered prompt, or the episode's ids extended (module docs)."""
        assert request.episode_id is not None
        if request.turn == 0:
            return self.renderer.first_prompt(request.messages, request.tools)
        episode = self._episodes.get(request.episode_id)
        if episode is None:
            raise PolicyError(
                f"no token state for episode {request.episode_id} at turn {request.turn}: "
                f"more than max_episodes={self.max_episodes} episodes were in flight"
            )
        if request.tools != episode.tools:
            return self.renderer.first_prompt(request.messages, request.tools)
        messages: list[Message] = request.messages
        if (
            len(messages) <= episode.covered
            or messages[episode.covered - 1].get("role") != "assistant"
        ):
            raise PolicyError(
                f"episode {request.episode_id}: the chat does not continue the last turn "
                f"(expected new messages after message {episode.covered - 1}, the assistant's)"
            )
        suffix = self.renderer.continuation(
            episode.completion_ids,
            messages[: episode.covered],
            messages[episode.covered :],
            request.tools,
        )
        return episode.ids + suffix

    def _remember(
        self, request: GenerateRequest, prompt_ids: list[int], completion_ids: list[int]
    ) -> None:
        """Keep what the episode's next prompt extends (the least recently active
        episodes beyond ``max_episodes`` are dropped)."""
        assert request.episode_id is not None
        self._episodes.pop(request.episode_id, None)
        self._episodes[request.episode_id] = _Episode(
            ids=prompt_ids + completion_ids,
            completion_ids=list(completion_ids),
            covered=len(request.messages) + 1,  # the assistant message this completion becomes
            tools=request.tools,
        )
        while len(self._episodes) > self.max_episodes:
            self._episodes.popitem(last=False)

    async def _send(
        self, body: dict[str, Any], session_id: str | None
    ) -> tuple[Any, str, float, int | None]:
        """POST ``body`` to the backend's path on the pool's endpoint for ``session_id``;
        returns the reply's JSON, the endpoint's URL, the seconds it took and the weight
        version the server reported (``weight_version_header``). Every request leaves
        here (failures are reported to the observer here too)."""
        payload = orjson.dumps(body)
        headers = None
        if self.session_header is not None and session_id is not None:
            headers = {self.session_header: session_id}
        endpoint = await self.pool.acquire(session_id)
        url = endpoint.url
        started = time.perf_counter()
        connection_failed = False
        try:
            async with self._session(url).post(
                f"{url}{self.backend.path}", data=payload, headers=headers
            ) as response:
                status = response.status
                content = await response.read()
                version = reported_version(response.headers, self.weight_version_header)
        except (asyncio.TimeoutError, aiohttp.ClientError) as exc:
            connection_failed = True
            if self.observer is not None:
                kind = "timeout" if isinstance(exc, asyncio.TimeoutError) else "connection"
                self.observer.request_failed(url, time.perf_counter() - started, kind)
            raise TransientPolicyError(f"{url}: {type(exc).__name__}: {exc}") from exc
        finally:
            self.pool.release(endpoint, connection_failed=connection_failed)
        try:
            data = _reply(url, status, content)
        except PolicyError as exc:
            if self.observer is not None:
                self.observer.request_failed(url, time.perf_counter() - started, exc.code)
            raise
        return data, url, time.perf_counter() - started, version

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

    async def _probe(self, url: str) -> bool:
        """Whether an ejected endpoint answers its health route again."""
        path = _PROBE_PATHS.get(self.backend.name, "/models")
        try:
            async with self._session(url).get(
                f"{url}{path}", timeout=aiohttp.ClientTimeout(total=5)
            ) as response:
                return response.status < 500
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return False

    async def aclose(self) -> None:
        await self.pool.aclose()
        for session in self._sessions.values():
            await session.close()
        self._sessions.clear()
        self._episodes.clear()


def _reply(url: str, status: int, content: bytes) -> Any:
    """The reply's JSON, or the typed error its status means (as the openai policy)."""
    if status == 429 or status >= 500:
        raise TransientPolicyError(f"{url}: HTTP {status}: {content[:200]!r}")
    text = content.decode(errors="replace")
    if status in (400, 413) and is_context_overflow(text):
        raise ContextLengthExceeded(f"{url}: HTTP {status}: {text[:500]}")
    if status >= 400:
        raise PolicyError(f"{url}: HTTP {status}: {text[:500]}")
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError as exc:
        raise TransientPolicyError(f"{url}: reply is not JSON: {exc}") from exc


def _tool_parser(parser: str | ToolParser) -> ToolParser:
    return tool_parser(parser) if isinstance(parser, str) else parser
