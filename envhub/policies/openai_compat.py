"""The ``openai`` policy: OpenAI-compatible chat endpoints (vLLM, SGLang, llama.cpp, OpenAI).

Requests go out through one ``aiohttp`` session per base URL with ``orjson`` bodies
(:class:`~envhub.policies.transport.PooledTransport`, shared with the ``tito`` policy),
neither through the ``openai`` SDK nor ``httpx``: both use httpcore's connection pool,
which scans every pooled connection on every request, so at hundreds of concurrent
episodes the pool alone cost over 10 CPU-ms per episode and capped the harness near 35
episodes/s (``benchmarks/rollout_overhead.py``; docs/internals.md has the figures). The wire format
is the same ``POST {base_url}/chat/completions``.

Token ids: with ``token_ids="auto"`` (default) every request asks for ``logprobs`` and
vLLM's ``return_token_ids``; a server that rejects these fields with HTTP 400 gets them
dropped for the rest of the run, and a server that ignores them simply returns none.

A 400 saying the prompt does not fit the model's context (each server words it its own
way; :func:`is_context_overflow` knows vLLM's, SGLang's, llama.cpp's and OpenAI's) raises
:class:`~envhub.errors.ContextLengthExceeded`, which the rollout treats as the end of the
episode rather than a failure.

Weight versions and updates (:mod:`envhub.policies.gate`): with ``weight_version_header``
(e.g. ``X-Weight-Version``) the version a server reports in that response header, or with
``weight_version_field`` (e.g. ``weight_version``) the one in that field of the model's
entry in the server's ``GET /models`` (read once per server and weight update, not per
turn: :mod:`envhub.policies.transport`), is recorded on the turn instead of the client's
``policy_version``. A stream that updates
weights attaches its gate (:meth:`OpenAIPolicy.attach_gate`); a request an
``abort-and-resume`` update ends early is sent again with the partial assistant message
last and vLLM's ``continue_final_message`` (``add_generation_prompt`` off), so the model
continues it on the new weights (:mod:`envhub.policies.partial`). The server parses tool
calls only from the continuation's text: a tool call the abort cut in two may come back
as text (the token-in policy, which parses the whole completion itself, has no such gap).
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Literal

from envhub.errors import InvalidRequest, PolicyError, TransientPolicyError
from envhub.policies.base import Completion, GenerateRequest, SamplingParams
from envhub.policies.gate import gated
from envhub.policies.partial import sampled_tokens, tokens_left, until_complete
from envhub.policies.retry import RetryPolicy
from envhub.policies.transport import PooledPolicy, TransportOptions, is_context_overflow
from envhub.types import ToolCall, chat_message

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from envhub.policies.factory import PolicyConfig

__all__ = ["OpenAIPolicy", "api_key_from", "is_context_overflow", "parse_chat_response"]

TokenIdMode = Literal["auto", "on", "off"]
_TOKEN_FIELDS = {"logprobs": True, "return_token_ids": True}


class OpenAIPolicy(PooledPolicy):
    """Chat completions against one or more base URLs, load-balanced
    (:class:`~envhub.policies.endpoints.EndpointPool`).

    The connection options (``api_key``, ``request_timeout_s``, ``endpoint_concurrency``,
    ``eject_after``, ``probe_interval_s``, ``routing``, ``sticky_max_outstanding``,
    ``session_header``, ``weight_version_header``, ``weight_version_field``) are
    :class:`~envhub.policies.transport.PooledTransport`'s: episode- or group-sticky
    routing keeps a session's turns on the server that caches its prefix, and every
    request of an episode carries its session id in ``session_header``.
    """

    def __init__(
        self,
        model: str,
        base_urls: list[str],
        *,
        sampling: SamplingParams | None = None,
        token_ids: TokenIdMode = "auto",
        retry: RetryPolicy | None = None,
        **transport: Unpack[TransportOptions],
    ) -> None:
        super().__init__(base_urls, "/models", transport, model=model)
        self.model = model
        self.sampling = sampling or SamplingParams()
        self.retry = retry or RetryPolicy()
        self.token_ids: TokenIdMode = token_ids
        self._static_body = {"model": model, **self.sampling.to_request()}

    @classmethod
    def from_config(cls, config: PolicyConfig) -> OpenAIPolicy:
        """The ``openai`` policy's factory (``envhub.policies`` entry point)."""
        if config.token_ids not in ("auto", "on", "off"):
            raise InvalidRequest(f"token_ids must be auto, on or off, not {config.token_ids!r}")
        return cls(
            config.require_model("openai"),
            config.require_base_urls("openai"),
            sampling=config.sampling,
            token_ids=config.token_ids,
            retry=config.retry,
            **config.transport,
        )

    async def generate(self, request: GenerateRequest) -> Completion:
        messages = [chat_message(m) for m in request.messages]
        body: dict[str, Any] = {**self._static_body, "messages": messages}
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
            # an abort before the first token left nothing to continue: ask afresh
            sent = _continuation(body, partial) if any(s.content for s in partial) else body
            return await self.retry.call(
                lambda: gated(self.gate, lambda: self._post(sent, session_id))
            )

        data, completion = await until_complete(self.gate, request)
        if data.get("choices"):  # the joined text, when an update split the call
            data["choices"][0].setdefault("message", {})["content"] = completion.content
        return data, completion

    async def _post(
        self, body: dict[str, Any], session_id: str | None
    ) -> tuple[dict[str, Any], Completion]:
        sent = {**body, **_TOKEN_FIELDS} if self.token_ids != "off" else body
        reply = await self.transport.post(
            "/chat/completions", sent, session_id, client_error=self._rejects_token_fields
        )
        observer = self.observer
        try:
            completion = parse_chat_response(reply.data)
        except PolicyError as exc:
            if observer is not None:
                observer.request_failed(reply.endpoint, reply.seconds, exc.code)
            raise
        completion.endpoint = reply.endpoint
        completion.weight_version = reply.version
        if self.token_ids == "auto" and completion.completion_token_ids is not None:
            self.token_ids = "on"  # the server supports them: a later 400 is about something else
        if observer is not None:
            observer.request_done(reply.endpoint, reply.seconds, completion)
        return reply.data, completion

    def _rejects_token_fields(self, url: str, status: int, text: str) -> PolicyError | None:
        """A 400 rejecting vLLM's token fields while ``token_ids="auto"``: stop asking for
        them, and send the request again without."""
        if status != 400 or self.token_ids != "auto" or not _mentions_token_fields(text):
            return None
        self.token_ids = "off"
        return TransientPolicyError(f"{url}: rejected token-id fields, retrying without")


def api_key_from(variable: str | None, who: str) -> str | None:
    """The API key of an operator-configured endpoint inside an environment (a judge's, a
    simulated user's), read from the environment variable its config names, so the key
    itself appears in no option, trajectory or log; ``None`` when none is named (the
    client's default, ``OPENAI_API_KEY``). :class:`InvalidRequest` naming ``who`` when the
    variable is unset or empty."""
    if not variable:
        return None
    key = os.environ.get(variable)
    if not key:
        raise InvalidRequest(f"{who}'s API key variable ${variable} is unset")
    return key


def _continuation(body: dict[str, Any], partial: list[Completion]) -> dict[str, Any]:
    """``body`` asking the model to continue the partial assistant message ``partial``,
    with its token limit lowered by the tokens ``partial`` sampled."""
    text = "".join(segment.content or "" for segment in partial)
    sent = {
        **body,
        "messages": [*body["messages"], {"role": "assistant", "content": text}],
        "continue_final_message": True,
        "add_generation_prompt": False,
    }
    for limit in ("max_tokens", "max_completion_tokens"):
        if isinstance(body.get(limit), int):
            sent[limit] = tokens_left(body[limit], sampled_tokens(partial))
    return sent


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
