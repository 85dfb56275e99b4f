"""What a policy is: given the chat so far and the tools, produce one assistant message.

The rollout engine only sees :class:`Policy`; OpenAI-compatible endpoints, litellm
providers and the reference (gold replay) policy are interchangeable behind it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from envhub.task import Task
from envhub.types import Message, ToolCall

__all__ = [
    "Completion",
    "EpisodeAware",
    "GenerateRequest",
    "Policy",
    "SamplingParams",
    "ServerBacked",
    "check_servers",
    "end_episode",
]


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Sampling parameters sent with every request and recorded on every trajectory."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_request(self) -> dict[str, Any]:
        params: dict[str, Any] = {"temperature": self.temperature, "top_p": self.top_p}
        if self.max_tokens is not None:
            params["max_tokens"] = self.max_tokens
        params.update(self.extra)
        return params


@dataclass(slots=True)
class GenerateRequest:
    """One model call of one episode.

    ``task`` is set when the environment is in-process (the reference policy needs its
    gold actions); ``turn`` counts the episode's model calls before this one (the
    assistant messages in ``messages``, unless the context was compacted).
    ``segment`` counts the context compactions before this call
    (:mod:`envhub.rollout.compaction`): ``messages`` is then a new context, not the
    previous call's extended, and a policy that extends an episode's token ids from call
    to call (``tito``) renders it afresh when ``segment`` changes.
    ``episode_id`` (the trajectory id) and ``group_id`` (its GRPO group) name the
    session: endpoint pools route by them and servers or routers receive them.
    ``messages`` are the trajectory's: tool results carry ``is_error`` and ``truncated``,
    which a policy sending them to a chat API drops (:func:`envhub.types.chat_message`).
    """

    messages: list[Message]
    tools: list[dict[str, Any]]
    turn: int
    task_id: str
    sample_index: int
    task: Task | None = None
    episode_id: str | None = None
    group_id: str | None = None
    segment: int = 0


@dataclass(slots=True)
class Completion:
    """One assistant message plus what the server reported about producing it.

    ``tool_calls`` keep the model's raw argument strings (malformed JSON included), so
    the session, not the policy, turns bad calls into error observations.
    """

    content: str | None
    tool_calls: list[ToolCall]
    finish_reason: str | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    completion_logprobs: list[float] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    endpoint: str | None = None  # the base URL that served it (None: the policy does not say)
    weight_version: int | None = None  # the version that sampled it (None: not known)
    completion_versions: list[int] | None = None  # per completion id, when versions differ

    def to_message(self) -> Message:
        """The assistant message as it goes into the chat history.

        Missing content is sent as ``""``, not ``null``: OpenAI and vLLM accept both, but
        llama.cpp's server rejects a ``null`` assistant content with HTTP 500.
        """
        message: Message = {"role": "assistant", "content": self.content or ""}
        if self.tool_calls:
            message["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        return message


@runtime_checkable
class Policy(Protocol):
    """Produces assistant messages. ``model`` is recorded on trajectories."""

    model: str

    async def generate(self, request: GenerateRequest) -> Completion: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class EpisodeAware(Protocol):
    """A policy that keeps state per episode between its turns (the ``tito`` policy's
    token ids) and must be told when an episode is over, so that it can let that state
    go: otherwise it holds every finished episode's until its own bound evicts them."""

    def end_episode(self, episode_id: str) -> None:
        """Forget episode ``episode_id`` (a :attr:`GenerateRequest.episode_id`). Called
        once an attempt of the episode is over, however it ended; a later request of the
        same id starts again at turn 0. Must not raise."""
        ...


def end_episode(policy: Policy, episode_id: str) -> None:
    """Tell ``policy`` that episode ``episode_id`` is over, if it keeps per-episode state
    (:class:`EpisodeAware`); a no-op for any other policy. Episode runners call it when
    an attempt ends."""
    if isinstance(policy, EpisodeAware):
        policy.end_episode(episode_id)


@runtime_checkable
class ServerBacked(Protocol):
    """A policy that sends to model servers it was given (``--base-url``) and can tell up
    front whether they answer, so that a run against a dead or mistyped URL stops before
    its first episode instead of masking episodes until the circuit breaker opens."""

    async def check_servers(self) -> None:
        """Raise :class:`~envhub.errors.PolicyError` naming the URLs when none of the
        servers answers (one that answers with an error status, 401 say, is up)."""
        ...


async def check_servers(policy: Policy) -> None:
    """Check that ``policy``'s model servers answer (:class:`ServerBacked`); a no-op for
    a policy that has none of its own (the reference policy, a hosted provider's)."""
    if isinstance(policy, ServerBacked):
        await policy.check_servers()
