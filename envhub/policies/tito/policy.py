"""The ``tito`` policy: token-in/token-out episodes, so the trainer gets the exact sequence.

A chat endpoint tokenises each turn's rendered chat itself, and re-rendering history
can tokenise earlier turns differently from what the model sampled ("token drift"). This
policy never lets that happen: it renders the first prompt once with the model's chat
template (:class:`~envhub.tokens.chat_template.ChatRenderer`), sends token ids to a
completion endpoint (:mod:`envhub.policies.tito.backends`: llama.cpp, vLLM, SGLang),
and builds each later prompt as the previous prompt + the sampled ids + the ids of the
new messages. Every turn's prompt therefore starts with the previous turn's prompt and
completion (``prefix_ok`` is true by construction, and the rollout checks it), and the
trainer reads the ids as recorded.

Tool calls are parsed from the decoded completion by a named parser
(:mod:`envhub.tokens.tool_call_parsers`, ``hermes`` by default); a malformed call is
passed on verbatim and the session answers it with an error observation, as for any policy.

An episode's ids live in the policy between its turns, keyed by
:attr:`~envhub.policies.base.GenerateRequest.episode_id`, until the episode ends: the
episode runner calls :meth:`TitoPolicy.end_episode` (the policy is
:class:`~envhub.policies.base.EpisodeAware`) when an attempt of the episode is over,
however it ended, so the state held is that of the episodes in flight. As a bound for
callers that never say (a loop of one's own calling :meth:`~TitoPolicy.generate`), only
the ``max_episodes`` most recently active episodes are kept, and a later turn of one that
was dropped fails with a :class:`~envhub.errors.PolicyError` (the trajectory is masked,
nothing drifts). A turn offered other tools than the episode started with (a user turn
changed them) renders its prompt afresh, since templates put the tools at the top: that
turn's ``prefix_ok`` is false and trainers start a new row there. So does the first turn
after a context compaction (a new :attr:`~envhub.policies.base.GenerateRequest.segment`):
its prompt is the compacted context rendered once, and the segment's later turns extend
it as before.

Requests go through an :class:`~envhub.policies.endpoints.EndpointPool` (balancing,
sticky routing, ejection) with the session id header, as in
:class:`~envhub.policies.openai_compat.OpenAIPolicy`: all of them leave through the
:class:`~envhub.policies.transport.PooledTransport` the two policies share, which reads
each reply's status into a typed error and reports failures to the observer.

Weight updates (:mod:`envhub.policies.gate`): a stream attaches its gate; a request an
``abort-and-resume`` update ends early continues on the new weights from the prompt plus
the ids sampled so far (with ``max_tokens`` reduced by them), and since tool calls are
parsed from the whole joined completion, a call the abort cut in two is read whole. The
version a server reports is recorded per turn (per token when an update split it): the
one the reply names (SGLang's integer ``meta_info.weight_version``,
:meth:`~envhub.policies.tito.backends.SGLangBackend.weight_version`), else the
``weight_version_header`` response header, else the ``weight_version_field`` of the
server's ``/models`` entry (:mod:`envhub.policies.transport`); without any, the client's
``policy_version``. Without a gate, an aborted reply is retried from scratch.

Set ``max_tokens`` with SGLang: without it the request names no ``max_new_tokens`` and
SGLang's own default (128 tokens) cuts completions short. Without it llama.cpp samples
until the end of the turn or the context (``n_predict: -1``), and vLLM is sent
``"max_tokens": null``, which it reads as the rest of the context (or the model's
generation-config default): an omitted field would mean its default of 16 tokens.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envhub.errors import InvalidRequest, PolicyError, TransientPolicyError
from envhub.policies.base import Completion, GenerateRequest, SamplingParams
from envhub.policies.gate import gated
from envhub.policies.partial import ABORTED, tokens_left, until_complete
from envhub.policies.retry import RetryPolicy
from envhub.policies.tito.backends import TitoBackend, tito_backend
from envhub.policies.transport import PooledPolicy, TransportOptions
from envhub.tokens.chat_template import ChatRenderer
from envhub.tokens.sample import Sample
from envhub.tokens.tool_call_parsers import ToolParser, tool_parser
from envhub.types import Message

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from envhub.policies.factory import PolicyConfig

__all__ = ["TitoPolicy"]

_PROBE_PATHS = {"llama.cpp": "/health", "sglang": "/health"}  # others: GET /models


@dataclass(slots=True)
class _Episode:
    """What an episode's next prompt extends: the last prompt + completion ids, the
    completion alone, how many messages they cover, the tools of the first prompt and the
    context segment (a compaction starts a new one)."""

    ids: list[int]
    completion_ids: list[int]
    covered: int
    tools: list[dict[str, Any]]
    segment: int = 0


class TitoPolicy(PooledPolicy):
    """Token-in/token-out generation against ``base_urls`` of one ``backend`` kind
    (llama.cpp and SGLang: the server's root URL; vLLM: its ``/v1`` URL).

    ``tokenizer`` is a ``transformers`` tokenizer with the model's chat template
    (:func:`envhub.tokens.tokenizers.load_tokenizer` reads one from a directory or a GGUF
    file). ``tool_parser`` is a registered parser name or a parser. The connection options
    are :class:`~envhub.policies.transport.PooledTransport`'s, as for
    :class:`~envhub.policies.openai_compat.OpenAIPolicy`.
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
        retry: RetryPolicy | None = None,
        max_episodes: int = 16384,
        **transport: Unpack[TransportOptions],
    ) -> None:
        self.backend = tito_backend(backend) if isinstance(backend, str) else backend
        probe_path = _PROBE_PATHS.get(self.backend.name, "/models")
        super().__init__(base_urls, probe_path, transport, model=model)
        self.model = model
        self.renderer = ChatRenderer(tokenizer)
        self.parse_tools = _tool_parser(tool_parser)
        self.sampling = sampling or SamplingParams()
        self.retry = retry or RetryPolicy()
        self.max_episodes = max_episodes
        self._episodes: OrderedDict[str, _Episode] = OrderedDict()

    @classmethod
    def from_config(cls, config: PolicyConfig) -> TitoPolicy:
        """The ``tito`` policy's factory (``envhub.policies`` entry point): the
        tokenizer of ``config.tito`` is loaded here when it is a path, with its
        ``chat_template``."""
        model = config.require_model("tito")
        urls = config.require_base_urls("tito")
        options = config.tito
        tokenizer = options.tokenizer
        if tokenizer is None:
            raise InvalidRequest("the tito policy needs the model's tokenizer (--tokenizer)")
        if isinstance(tokenizer, (str, os.PathLike)):
            from envhub.tokens.tokenizers import load_tokenizer

            tokenizer = load_tokenizer(tokenizer, chat_template=options.chat_template)
        elif options.chat_template is not None:
            raise InvalidRequest("chat_template goes with a tokenizer path, not a tokenizer object")
        return cls(
            model,
            urls,
            tokenizer,
            backend=options.backend,
            tool_parser=options.tool_parser,
            sampling=config.sampling,
            retry=config.retry,
            **config.transport,
        )

    async def generate(self, request: GenerateRequest) -> Completion:
        if request.episode_id is None:
            raise PolicyError("the tito policy needs each request's episode_id")
        # rendering and tokenising a long chat takes milliseconds: off the event loop,
        # so thousands of episodes in flight keep their requests and env steps moving
        prompt_ids = await asyncio.to_thread(self._prompt_ids, request)
        session_id = self.pool.session_key(request.episode_id, request.group_id)
        seconds = 0.0

        async def segment(partial: list[Completion]) -> tuple[dict[str, Any], Completion]:
            """One request continuing ``partial`` (the segments an update cut short)."""
            nonlocal seconds
            done = [t for s in partial for t in s.completion_token_ids or []]
            body = self.backend.body(self.model, prompt_ids + done, self._sampling(len(done)))
            reply = await self.retry.call(
                lambda: gated(
                    self.gate, lambda: self.transport.post(self.backend.path, body, session_id)
                )
            )
            seconds += reply.seconds
            sample: Sample = self.backend.parse(reply.data)
            version = self.backend.weight_version(reply.data)
            if sample.aborted and self.gate is None:  # no update to wait for: ask again
                raise TransientPolicyError(f"{reply.endpoint}: the server aborted the request")
            reason = ABORTED if sample.aborted else ("stop" if sample.finished else "length")
            return reply.data, Completion(
                content=None,
                tool_calls=[],
                finish_reason=reason,
                completion_token_ids=list(sample.token_ids),
                completion_logprobs=sample.logprobs,
                endpoint=reply.endpoint,
                weight_version=reply.version if version is None else version,
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

    def _sampling(self, done: int) -> SamplingParams:
        """The sampling parameters of a request continuing ``done`` sampled ids."""
        if not done or self.sampling.max_tokens is None:
            return self.sampling
        left = tokens_left(self.sampling.max_tokens, done)
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
        if request.tools != episode.tools or request.segment != episode.segment:
            # new tools at the top of the prompt, or a compacted context: render afresh
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
            segment=request.segment,
        )
        while len(self._episodes) > self.max_episodes:
            self._episodes.popitem(last=False)

    def end_episode(self, episode_id: str) -> None:
        """Release the episode's token state: its next turn, if any, is a new attempt that
        starts at turn 0 (:class:`~envhub.policies.base.EpisodeAware`). Without this the
        ids of ended episodes stay until ``max_episodes`` newer ones push them out, and
        with that many in flight the oldest live ones go first."""
        self._episodes.pop(episode_id, None)

    async def aclose(self) -> None:
        await super().aclose()
        self._episodes.clear()


def _tool_parser(parser: str | ToolParser) -> ToolParser:
    return tool_parser(parser) if isinstance(parser, str) else parser
