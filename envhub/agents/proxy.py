"""The per-episode capture proxy: an OpenAI-compatible ``/v1/chat/completions`` in front of
the policy's endpoints, which records every model call an external agent makes.

An agent framework is pointed at :attr:`CaptureProxy.base_url` with
:attr:`CaptureProxy.api_key` as its key. Each request is forwarded through the policy's
own :meth:`~envhub.policies.OpenAIPolicy.chat` (the same endpoint balancing, retries and
token-id fields as ``envhub rollout``'s loop), with the run's model name and sampling
parameters in place of the agent's, so that what the trajectory records is what was
sampled. The upstream reply goes back to the agent unchanged, and the call is kept as a
:class:`CapturedCall` whose token ids and logprobs are the server's, never re-tokenized.

Requests reach the server in the form every OpenAI-compatible server accepts, as envhub's
own policy sends them: an assistant message's missing content is ``""`` (llama.cpp's
server refuses ``null``), and content given as text parts only is one string (the parts
joined by newlines, as vLLM joins them). These are the messages the model saw, so they
are the ones recorded.

Failures: a request the proxy cannot forward gets a 4xx with ``{"error": {code,
message}}``; an upstream failure (after the policy's retries) gets a 502 (400 for a prompt
that outgrew the context) and is kept in :attr:`CaptureProxy.failure`, after which every
request is refused at once: the episode is over, and whatever the agent does with the
error, the driver reads the failure here and masks the episode.

It listens on 127.0.0.1 on an ephemeral port, in the caller's event loop, and only for
requests that carry its per-episode bearer token.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

import orjson
from aiohttp import web

from envhub.errors import ContextLengthExceeded, PolicyError
from envhub.policies.base import Completion, SamplingParams
from envhub.types import Message

__all__ = ["CaptureProxy", "CapturedCall", "ChatUpstream"]

MAX_REQUEST_BYTES = 64 << 20
"""Largest request body the proxy reads (a long agent history with its tools)."""


@runtime_checkable
class ChatUpstream(Protocol):
    """What the proxy forwards to: :class:`~envhub.policies.OpenAIPolicy` (``--policy
    openai``), whose ``chat`` posts a caller-built body with its routing and retries
    (the episode and group ids place it, as the rollout loop's calls)."""

    model: str
    sampling: SamplingParams

    async def chat(
        self, body: dict[str, Any], *, episode_id: str | None = None, group_id: str | None = None
    ) -> tuple[dict[str, Any], Completion]: ...


@dataclass(frozen=True, slots=True)
class CapturedCall:
    """One model call of the agent: what it sent, what the server answered."""

    messages: list[Message]
    tools: list[dict[str, Any]]
    completion: Completion
    latency_s: float
    policy_version: int | None


class CaptureProxy:
    """``async with CaptureProxy(policy) as proxy:`` serves ``proxy.base_url`` until exit.

    ``calls`` holds the captured calls in the order their replies were sent;
    ``failure`` the upstream error that ended the episode, if any. ``policy_version`` is
    read at each call and recorded with it, as the rollout loop does; ``episode_id`` and
    ``group_id`` go with every call to the upstream (sticky routing, the session header).
    """

    def __init__(
        self,
        upstream: ChatUpstream,
        *,
        policy_version: Callable[[], int | None] = lambda: None,
        episode_id: str | None = None,
        group_id: str | None = None,
    ) -> None:
        self.upstream = upstream
        self.policy_version = policy_version
        self.episode_id = episode_id
        self.group_id = group_id
        self.api_key = secrets.token_urlsafe(24)
        self.calls: list[CapturedCall] = []
        self.failure: PolicyError | None = None
        self._overrides = {"model": upstream.model, **upstream.sampling.to_request()}
        self._runner: web.AppRunner | None = None
        self._port = 0
        self._in_flight: set[asyncio.Task[Any]] = set()

    @property
    def base_url(self) -> str:
        """The OpenAI base URL to give the agent (ends in ``/v1``)."""
        if self._runner is None:
            raise RuntimeError("the capture proxy is not running (use it with `async with`)")
        return f"http://127.0.0.1:{self._port}/v1"

    async def __aenter__(self) -> CaptureProxy:
        app = web.Application(client_max_size=MAX_REQUEST_BYTES)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._port = runner.addresses[0][1]
        self._runner = runner
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        runner, self._runner = self._runner, None
        # calls still in flight belong to an agent that is gone (it crashed, or the episode
        # was cancelled): they end with the proxy, not on their own later
        for task in self._in_flight:
            task.cancel()
        await asyncio.gather(*self._in_flight, return_exceptions=True)
        if runner is not None:
            await runner.cleanup()

    async def _models(self, request: web.Request) -> web.Response:
        refused = self._refuse_unauthorized(request)
        if refused is not None:
            return refused
        listing = {"object": "list", "data": [{"id": self.upstream.model, "object": "model"}]}
        return web.Response(body=orjson.dumps(listing), content_type="application/json")

    async def _chat(self, request: web.Request) -> web.Response:
        refused = self._refuse_unauthorized(request)
        if refused is not None:
            return refused
        if self.failure is not None:
            return _error(503, "episode_failed", f"the model server failed: {self.failure}")
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError as exc:
            return _error(400, "invalid_request", f"the request body is not JSON: {exc}")
        problem = _unsupported(body)
        if problem is not None:
            return _error(400, "invalid_request", problem)
        messages = [_plain(message) for message in body["messages"]]
        forwarded = {**body, **self._overrides, "messages": messages}
        forwarded.pop("stream", None)
        forwarded.pop("stream_options", None)
        if body.get("tools") and "tool_choice" not in body:
            # OpenAI's default with tools, but llama.cpp's server only calls tools when told
            forwarded["tool_choice"] = "auto"
        version = self.policy_version()
        started = time.perf_counter()
        handler = asyncio.current_task()
        assert handler is not None
        self._in_flight.add(handler)
        try:
            data, completion = await self.upstream.chat(
                forwarded, episode_id=self.episode_id, group_id=self.group_id
            )
        except ContextLengthExceeded as exc:
            self.failure = exc
            return _error(400, "context_length_exceeded", str(exc))
        except PolicyError as exc:
            self.failure = exc
            return _error(502, "upstream_error", str(exc))
        except Exception as exc:  # a policy bug: the episode cannot be trusted either
            self.failure = PolicyError(f"policy bug: {type(exc).__name__}: {exc}")
            return _error(502, "upstream_error", str(self.failure))
        finally:
            self._in_flight.discard(handler)
        self.calls.append(
            CapturedCall(
                messages=messages,
                tools=body.get("tools") or [],
                completion=completion,
                latency_s=time.perf_counter() - started,
                policy_version=version,
            )
        )
        return web.Response(body=orjson.dumps(data), content_type="application/json")

    def _refuse_unauthorized(self, request: web.Request) -> web.Response | None:
        supplied = request.headers.get("authorization", "")
        if not secrets.compare_digest(supplied.encode(), f"Bearer {self.api_key}".encode()):
            return _error(401, "unauthorized", "missing or wrong bearer token")
        return None


def _unsupported(body: Any) -> str | None:
    """Why the proxy cannot forward ``body`` as one recorded call, or ``None``."""
    if not isinstance(body, dict):
        return "the request body must be a JSON object"
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return "`messages` must be a list of chat messages"
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        return "`tools` must be a list"
    if body.get("stream"):
        return "the capture proxy does not stream: ask for non-streamed completions"
    if body.get("n", 1) not in (1, None):
        return "the capture proxy records one choice per call: n must be 1"
    return None


def _plain(message: Message) -> Message:
    """``message`` in the form every server accepts (see the module docstring)."""
    content = message.get("content")
    if content is None and message.get("role") == "assistant":
        return {**message, "content": ""}
    if isinstance(content, list) and all(
        isinstance(part, dict) and part.get("type") == "text" for part in content
    ):
        return {**message, "content": "\n".join(str(part.get("text", "")) for part in content)}
    return message


def _error(status: int, code: str, message: str) -> web.Response:
    body = orjson.dumps({"error": {"code": code, "message": message, "type": code}})
    return web.Response(status=status, body=body, content_type="application/json")
