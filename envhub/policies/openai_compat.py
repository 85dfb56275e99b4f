"""The ``openai`` policy: OpenAI-compatible chat endpoints (vLLM, SGLang, llama.cpp, OpenAI).

Requests go out through one ``aiohttp`` session per base URL with ``orjson`` bodies,
neither through the ``openai`` SDK nor ``httpx``: both use httpcore's connection pool,
which scans every pooled connection on every request, so at hundreds of concurrent
episodes the pool alone cost over 10 CPU-ms per episode and capped the harness near 35
episodes/s (``benchmarks/rollout_overhead.py``; README has the figures). The wire format
is the same ``POST {base_url}/chat/completions``.

Token ids: with ``token_ids="auto"`` (default) every request asks for ``logprobs`` and
vLLM's ``return_token_ids``; a server that rejects these fields with HTTP 400 gets them
dropped for the rest of the run, and a server that ignores them simply returns none.

A 400 saying the prompt does not fit the model's context (each server words it its own
way; :func:`is_context_overflow` knows vLLM's, SGLang's, llama.cpp's and OpenAI's) raises
:class:`~envhub.errors.ContextLengthExceeded`, which the rollout treats as the end of the
episode rather than a failure.

Weight versions and updates (:mod:`envhub.policies.gate`): with ``weight_version_header``
(e.g. ``X-Weight-Version``) the version a server reports in that response header is
recorded on the turn instead of the client's ``policy_version``. A stream that updates
weights attaches its gate (:meth:`OpenAIPolicy.attach_gate`); a request an
``abort-and-resume`` update ends early is sent again with the partial assistant message
last and vLLM's ``continue_final_message`` (``add_generation_prompt`` off), so the model
continues it on the new weights (:mod:`envhub.policies.partial`). The server parses tool
calls only from the continuation's text: a tool call the abort cut in two may come back
as text (the token-in policy, which parses the whole completion itself, has no such gap).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from typing import Any, Literal

import aiohttp
import orjson

from envhub.errors import ContextLengthExceeded, PolicyError, TransientPolicyError
from envhub.policies.base import Completion, GenerateRequest, SamplingParams
from envhub.policies.endpoints import Endpoint, EndpointPool, RoutingMode
from envhub.policies.gate import GenerationGate, gated
from envhub.policies.observer import RequestObserver
from envhub.policies.partial import until_complete
from envhub.policies.retry import RetryPolicy
from envhub.policies.weight_sync import reported_version
from envhub.types import ToolCall

__all__ = ["OpenAIPolicy", "is_context_overflow", "parse_chat_response"]

TokenIdMode = Literal["auto", "on", "off"]
_TOKEN_FIELDS = {"logprobs": True, "return_token_ids": True}
_CONTEXT_OVERFLOW = re.compile(
    r"context_length_exceeded|maximum context length|context length|maximum model length"
    r"|context size|context window|prompt is too long|exceed_context_size",
    re.IGNORECASE,
)


class OpenAIPolicy:
    """Chat completions against one or more base URLs, load-balanced (:class:`EndpointPool`).

    ``routing`` and ``sticky_max_outstanding`` are the pool's (episode- or group-sticky
    routing keeps a session's turns on the server that caches its prefix). Every request
    of an episode carries its session id (:meth:`EndpointPool.session_key`) in the
    ``session_header`` (``None``: no header), so that a router in front of several
    servers can keep the session on one server too.
    """

    def __init__(
        self,
        model: str,
        base_urls: list[str],
        *,
        sampling: SamplingParams | None = None,
        api_key: str | None = None,
        token_ids: TokenIdMode = "auto",
        request_timeout_s: float = 600.0,
        retry: RetryPolicy | None = None,
        endpoint_concurrency: int | None = None,
        eject_after: int = 3,
        probe_interval_s: float = 2.0,
        routing: RoutingMode = "least-outstanding",
        sticky_max_outstanding: int | None = None,
        session_header: str | None = "X-Session-ID",
        weight_version_header: str | None = None,
    ) -> None:
        self.model = model
        self.sampling = sampling or SamplingParams()
        self.retry = retry or RetryPolicy()
        self.token_ids: TokenIdMode = token_ids
        key = api_key or os.environ.get("OPENAI_API_KEY")
        self._headers = {"content-type": "application/json"}
        if key:
            self._headers["authorization"] = f"Bearer {key}"
        self._timeout = aiohttp.ClientTimeout(
            total=request_timeout_s, sock_connect=min(10.0, request_timeout_s)
        )
        self._connection_limit = endpoint_concurrency or 0  # 0: aiohttp's "unlimited"
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
        self._static_body = {"model": model, **self.sampling.to_request()}
        self.observer: RequestObserver | None = None

    def observe(self, observer: RequestObserver | None) -> None:
        """Report every request and every ejected endpoint to ``observer`` (``None``: stop;
        :class:`~envhub.policies.observer.ObservablePolicy`)."""
        self.observer = observer
        self.pool.on_eject = None if observer is None else observer.endpoint_ejected

    async def generate(self, request: GenerateRequest) -> Completion:
        body: dict[str, Any] = {**self._static_body, "messages": request.messages}
        if request.tools:
            # "auto" is OpenAI's default with tools, but llama.cpp's server only emits
            # tool calls when it is sent explicitly
            body["tools"] = request.tools
            body["tool_choice"] = "auto"
        _, completion = await self.chat(
            body, episode_id=request.episode_id, group_id=request.group_id
        )
        for index, call in enumerate(completion.tool_calls):
            if not call.id:  # some servers omit ids; the chat history needs unique ones
                call.id = f"call_{request.turn}_{index}"
        return completion

    async def chat(
        self, body: dict[str, Any], *, episode_id: str | None = None, group_id: str | None = None
    ) -> tuple[dict[str, Any], Completion]:
        """POST a chat-completions ``body`` the caller built (the agents' capture proxy
        forwards an agent's request) with :meth:`generate`'s routing, retries and token-id
        fields; returns the server's reply both as it came (parsed JSON) and as a
        :class:`Completion`. Raises as :meth:`generate` does."""
        session_id = self.pool.session_key(episode_id, group_id)

        async def request(partial: list[Completion]) -> tuple[dict[str, Any], Completion]:
            sent = _continuation(body, partial) if partial else body
            return await self.retry.call(
                lambda: gated(self.gate, lambda: self._post(sent, session_id))
            )

        data, completion = await until_complete(self.gate, request)
        if data.get("choices"):  # the joined text, when an update split the call
            data["choices"][0].setdefault("message", {})["content"] = completion.content
        return data, completion

    def attach_gate(self, gate: GenerationGate | None) -> None:
        """Send every request through ``gate`` (a stream's, during weight updates)."""
        self.gate = gate

    async def _post(
        self, body: dict[str, Any], session_id: str | None
    ) -> tuple[dict[str, Any], Completion]:
        send_token_fields = self.token_ids != "off"
        payload = orjson.dumps({**body, **_TOKEN_FIELDS} if send_token_fields else body)
        headers = None
        if self.session_header is not None and session_id is not None:
            headers = {self.session_header: session_id}
        endpoint = await self.pool.acquire(session_id)
        observer = self.observer
        if observer is None:
            return await self._exchange(endpoint, payload, headers)
        started = time.perf_counter()
        try:
            data, completion = await self._exchange(endpoint, payload, headers)
        except PolicyError as exc:
            observer.request_failed(endpoint.url, time.perf_counter() - started, _kind(exc))
            raise
        observer.request_done(endpoint.url, time.perf_counter() - started, completion)
        return data, completion

    async def _exchange(
        self, endpoint: Endpoint, payload: bytes, headers: dict[str, str] | None
    ) -> tuple[dict[str, Any], Completion]:
        """One request to ``endpoint``, which the pool gave out and gets back here."""
        connection_failed = False
        try:
            session = self._session(endpoint.url)
            async with session.post(
                f"{endpoint.url}/chat/completions", data=payload, headers=headers
            ) as response:
                status = response.status
                content = await response.read()
                version = reported_version(response.headers, self.weight_version_header)
        except asyncio.TimeoutError as exc:
            connection_failed = True
            raise TransientPolicyError(f"{endpoint.url}: timed out") from exc
        except aiohttp.ClientError as exc:
            connection_failed = True
            raise TransientPolicyError(f"{endpoint.url}: {type(exc).__name__}: {exc}") from exc
        finally:
            self.pool.release(endpoint, connection_failed=connection_failed)
        if status == 429 or status >= 500:
            raise TransientPolicyError(f"{endpoint.url}: HTTP {status}: {content[:200]!r}")
        text = content.decode(errors="replace")
        if status == 400 and self.token_ids == "auto" and _mentions_token_fields(text):
            self.token_ids = "off"  # the server rejects vLLM's token fields: stop asking
            raise TransientPolicyError(
                f"{endpoint.url}: rejected token-id fields, retrying without"
            )
        if status in (400, 413) and is_context_overflow(text):
            raise ContextLengthExceeded(f"{endpoint.url}: HTTP {status}: {text[:500]}")
        if status >= 400:
            raise PolicyError(f"{endpoint.url}: HTTP {status}: {text[:500]}")
        try:
            data = orjson.loads(content)
        except orjson.JSONDecodeError as exc:
            raise TransientPolicyError(f"{endpoint.url}: reply is not JSON: {exc}") from exc
        completion = parse_chat_response(data)
        completion.endpoint = endpoint.url
        completion.weight_version = version
        if self.token_ids == "auto" and completion.completion_token_ids is not None:
            self.token_ids = "on"  # the server supports them: a later 400 is about something else
        return data, completion

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
        """Whether an ejected endpoint answers ``GET /models`` again."""
        try:
            async with self._session(url).get(
                f"{url}/models", timeout=aiohttp.ClientTimeout(total=5)
            ) as response:
                return response.status < 500
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return False

    async def aclose(self) -> None:
        await self.pool.aclose()
        for session in self._sessions.values():
            await session.close()
        self._sessions.clear()


def is_context_overflow(error_text: str) -> bool:
    """Whether a model server's 400 says the prompt (plus ``max_tokens``) is too long."""
    return _CONTEXT_OVERFLOW.search(error_text) is not None


def _kind(error: PolicyError) -> str:
    """A failed request's kind for observers: the network's, else the error's code."""
    if isinstance(error.__cause__, asyncio.TimeoutError):
        return "timeout"
    if isinstance(error.__cause__, aiohttp.ClientError):
        return "connection"
    return error.code


def _continuation(body: dict[str, Any], partial: list[Completion]) -> dict[str, Any]:
    """``body`` asking the model to continue the partial assistant message ``partial``."""
    text = "".join(segment.content or "" for segment in partial)
    return {
        **body,
        "messages": [*body["messages"], {"role": "assistant", "content": text}],
        "continue_final_message": True,
        "add_generation_prompt": False,
    }


def _mentions_token_fields(error_text: str) -> bool:
    return "token_ids" in error_text or "logprobs" in error_text


def parse_chat_response(data: dict[str, Any]) -> Completion:
    """The first choice of a chat-completions reply, with token data where present.

    vLLM puts ``prompt_token_ids`` on the reply (newer versions) or on the choice, and the
    sampled ids in ``choices[0].token_ids``; logprobs are ``choices[0].logprobs.content[i]
    .logprob``. Tool-call arguments are kept verbatim (a non-string is JSON-encoded).
    """
    choices = data.get("choices") or []
    if not choices:
        raise PolicyError(f"the model server returned no choices: {str(data)[:200]}")
    choice = choices[0]
    message = choice.get("message") or {}
    calls = []
    for raw in message.get("tool_calls") or []:
        function = raw.get("function") or {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments if arguments is not None else {})
        calls.append(
            ToolCall(id=raw.get("id") or "", name=function.get("name") or "", arguments=arguments)
        )
    logprobs = choice.get("logprobs")
    content_logprobs = logprobs.get("content") if isinstance(logprobs, dict) else None
    usage = data.get("usage") or {}
    return Completion(
        content=message.get("content"),
        tool_calls=calls,
        finish_reason=choice.get("finish_reason"),
        prompt_token_ids=choice.get("prompt_token_ids") or data.get("prompt_token_ids"),
        completion_token_ids=choice.get("token_ids"),
        completion_logprobs=[entry["logprob"] for entry in content_logprobs]
        if content_logprobs
        else None,
        prompt_tokens=usage.get("prompt_tokens") or 0,
        completion_tokens=usage.get("completion_tokens") or 0,
    )
