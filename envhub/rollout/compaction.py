"""Context compaction: long episodes keep going on a shorter context.

When an episode's context passes a threshold (:class:`CompactAt`: ``turns:N``, N model
calls since the context last started; ``tokens:N``, the last call's prompt + completion
tokens as the server counted them), the policy loop
(:class:`~envhub.rollout.episode.PolicyLoop`) asks a :class:`CompactionStrategy` for a
shorter context before its next model call, and the episode goes on from it. Built-in
strategies (:data:`STRATEGIES`; others by the ``envhub.compaction_strategies`` entry-point
group or as ``module:Name``):

- ``drop-tool-outputs``: the tool results older than the last ``keep`` turns are
  replaced by a placeholder (those longer than it); every message stays, so tool calls
  keep their results.
- ``keep-last-k``: the opening messages (system prompt, task) and the last ``keep``
  turns; the turns between are dropped.
- ``summarize``: like ``keep-last-k``, with the dropped turns replaced by a summary the
  policy itself writes (or a separate, operator-configured ``summarizer`` policy: any
  policy of :mod:`envhub.policies`, with its retries and balancing). A summarizer's
  failure, or an empty summary, masks the episode like any model error.

Each compaction starts a new *segment* of the trajectory
(:class:`~envhub.trajectory.Compaction`): the trajectory keeps the whole conversation
and records the context each segment started from, the segment's turns record the
prompt ids the model was fed, and trainers build one row per segment. Tree rollouts and
gold-prefix restarts are not combined with compaction in this release
(:func:`check_combination`): a tree's fork points and a gold replay's turns count on one
context per episode.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from envhub.errors import InvalidRequest, PolicyError
from envhub.policies.base import Completion, GenerateRequest, Policy, end_episode
from envhub.registry import PluginKind, load_plugin, plugin_names
from envhub.trajectory import SummaryCall
from envhub.types import Message

__all__ = [
    "STRATEGIES",
    "STRATEGY_PLUGINS",
    "CompactAt",
    "Compacted",
    "CompactionConfig",
    "CompactionRequest",
    "CompactionStrategy",
    "DropToolOutputs",
    "KeepLastTurns",
    "Summarize",
    "check_combination",
    "make_strategy",
]

DROPPED_OUTPUT = "[dropped]"
SUMMARY_HEADER = "Summary of the earlier conversation (compacted to save context):\n"
SUMMARY_INSTRUCTION = (
    "Summarize the conversation so far for yourself: the task, what you tried, the tool "
    "results that matter and what is left to do. Be brief; answer with the summary only."
)


@dataclass(frozen=True, slots=True)
class CompactAt:
    """The threshold: ``kind`` ``"turns"`` (model calls since the context started) or
    ``"tokens"`` (the last call's prompt + completion tokens), at ``value``."""

    kind: Literal["turns", "tokens"]
    value: int

    @classmethod
    def parse(cls, spec: str) -> CompactAt:
        """``turns:N`` or ``tokens:N`` (N >= 1); :class:`InvalidRequest` otherwise."""
        kind, _, value = spec.partition(":")
        if kind not in ("turns", "tokens") or not value.isdigit() or int(value) < 1:
            raise InvalidRequest(f"compact at turns:N or tokens:N (N >= 1), not {spec!r}")
        return cls("turns" if kind == "turns" else "tokens", int(value))

    def reached(self, segment_turns: int, last_tokens: int | None) -> bool:
        """Whether to compact before the next call: ``segment_turns`` calls were made on
        this context, the last one's prompt + completion being ``last_tokens`` tokens
        (``None``: not reported; a token threshold then never fires)."""
        if segment_turns == 0:
            return False
        if self.kind == "turns":
            return segment_turns >= self.value
        return last_tokens is not None and last_tokens >= self.value

    def __str__(self) -> str:
        return f"{self.kind}:{self.value}"


@dataclass(frozen=True, slots=True)
class CompactionRequest:
    """What a strategy compacts: the model's current ``context`` and the ``tools`` it is
    offered, for episode ``episode_id`` (group ``group_id``) before its call ``turn``,
    starting context segment ``segment``. ``summarizer`` is the policy that writes
    summaries (the episode's own, unless an operator configured another endpoint) and
    ``generate`` calls it (the episode's own through the run's weight gate)."""

    context: list[Message]
    tools: list[dict[str, object]]
    turn: int
    segment: int
    task_id: str
    sample_index: int
    episode_id: str
    group_id: str | None
    summarizer: Policy
    generate: Callable[[GenerateRequest], Awaitable[Completion]]


@dataclass(frozen=True, slots=True)
class Compacted:
    """A strategy's answer: the new context, and the summary call that wrote part of it."""

    messages: list[Message]
    summary: SummaryCall | None = None


class CompactionStrategy(Protocol):
    """Makes a context shorter. :meth:`compact` returns ``None`` when it has nothing to
    drop (the episode then goes on as it is, and is asked again before the next call).
    ``name`` is recorded on each compaction (:attr:`~envhub.trajectory.Compaction.strategy`)."""

    @property
    def name(self) -> str: ...

    async def compact(self, request: CompactionRequest) -> Compacted | None: ...


def _assistant_indexes(context: list[Message]) -> list[int]:
    return [i for i, m in enumerate(context) if m.get("role") == "assistant"]


def _split(context: list[Message], keep: int) -> tuple[int, int] | None:
    """``(opening, tail)``: the context's opening messages are ``context[:opening]``
    (before the first assistant message) and its last ``keep`` turns ``context[tail:]``;
    ``None`` when there is no turn before those to drop."""
    turns = _assistant_indexes(context)
    if len(turns) <= keep:
        return None
    return turns[0], turns[len(turns) - keep] if keep else len(context)


@dataclass(frozen=True)
class DropToolOutputs:
    """Replace the tool results older than the last ``keep`` turns by a placeholder
    (:data:`DROPPED_OUTPUT`), where it is shorter than they are."""

    keep: int = 2
    name: str = "drop-tool-outputs"

    async def compact(self, request: CompactionRequest) -> Compacted | None:
        cut = _split(request.context, self.keep)
        if cut is None:
            return None
        tail = cut[1]
        changed = False
        messages = []
        for index, message in enumerate(request.context):
            old = message.get("role") == "tool" and index < tail
            if old and len(str(message.get("content") or "")) > len(DROPPED_OUTPUT):
                message = {**message, "content": DROPPED_OUTPUT}
                changed = True
            messages.append(message)
        return Compacted(messages) if changed else None


@dataclass(frozen=True)
class KeepLastTurns:
    """The opening messages and the last ``keep`` turns."""

    keep: int = 2
    name: str = "keep-last-k"

    async def compact(self, request: CompactionRequest) -> Compacted | None:
        cut = _split(request.context, self.keep)
        if cut is None:
            return None
        opening, tail = cut
        return Compacted(request.context[:opening] + request.context[tail:])


@dataclass(frozen=True)
class Summarize:
    """The opening messages, a summary of the turns between, and the last ``keep``
    turns. The summarizer sees the context up to the kept turns (an earlier summary
    included, which the new one replaces) and ``instruction``, with no tools offered;
    a summary longer than ``max_chars`` is cut there."""

    keep: int = 2
    instruction: str = SUMMARY_INSTRUCTION
    max_chars: int = 4000
    name: str = "summarize"

    async def compact(self, request: CompactionRequest) -> Compacted | None:
        context = request.context
        cut = _split(context, self.keep)
        if cut is None:
            return None
        opening, tail = cut
        head = context[:opening]
        if head and str(head[-1].get("content") or "").startswith(SUMMARY_HEADER):
            head = head[:-1]  # the previous summary: the new one covers it
        # its own episode id: a policy's per-episode state (tito) is not the episode's
        call_id = f"{request.episode_id}-summary{request.segment}"
        summary_request = GenerateRequest(
            messages=[*context[:tail], {"role": "user", "content": self.instruction}],
            tools=[],
            turn=0,
            task_id=request.task_id,
            sample_index=request.sample_index,
            episode_id=call_id,
            group_id=request.group_id,
        )
        started = time.perf_counter()
        try:
            completion = await request.generate(summary_request)
        finally:
            end_episode(request.summarizer, call_id)
        text = (completion.content or "").strip()
        if not text:
            raise PolicyError(f"the summarizer ({request.summarizer.model}) wrote no summary "
                              "text", code="compaction_error")  # fmt: skip
        text = text[: self.max_chars]
        summary = SummaryCall(
            model=request.summarizer.model, text=text, latency_s=time.perf_counter() - started,
            prompt_tokens=completion.prompt_tokens, completion_tokens=completion.completion_tokens,
            endpoint=completion.endpoint,
        )  # fmt: skip
        message: Message = {"role": "user", "content": SUMMARY_HEADER + text}
        return Compacted([*head, message, *context[tail:]], summary)


STRATEGIES: dict[str, Callable[..., CompactionStrategy]] = {
    "drop-tool-outputs": DropToolOutputs,
    "keep-last-k": KeepLastTurns,
    "summarize": Summarize,
}
"""The built-in strategies by name; each takes ``keep`` (turns kept verbatim)."""

STRATEGY_PLUGINS: PluginKind[Callable[..., CompactionStrategy]] = PluginKind(
    "envhub.compaction_strategies", "compaction strategy"
)
"""Third-party strategies: a factory taking ``keep=`` that returns a strategy."""


def make_strategy(name: str, *, keep: int = 2) -> CompactionStrategy:
    """The strategy registered as ``name`` (built in, an ``envhub.compaction_strategies``
    entry point, or ``module:Name``) keeping ``keep`` turns verbatim."""
    if keep < 0:
        raise InvalidRequest(f"turns kept by compaction must be >= 0, not {keep}")
    factory = STRATEGIES.get(name)
    if factory is None:
        if ":" not in name and name not in plugin_names(STRATEGY_PLUGINS):
            known = ", ".join([*STRATEGIES, *plugin_names(STRATEGY_PLUGINS)])
            raise InvalidRequest(f"unknown compaction strategy {name!r}; choose one of "
                                 f"{known}, or a module:Name")  # fmt: skip
        factory = load_plugin(STRATEGY_PLUGINS, name)
    return factory(keep=keep)


@dataclass(frozen=True)
class CompactionConfig:
    """Compact an episode's context at ``at`` with ``strategy`` (a name or a strategy).
    ``summarizer``: the operator's policy that writes summaries (default: the episode's
    own policy); it is never settable by a client or an environment."""

    at: CompactAt
    strategy: CompactionStrategy = field(default_factory=Summarize)
    summarizer: Policy | None = None

    @classmethod
    def of(
        cls, at: str | CompactAt, strategy: str | CompactionStrategy = "summarize", *,
        keep: int = 2, summarizer: Policy | None = None,
    ) -> CompactionConfig:  # fmt: skip
        """The configuration from ``envhub rollout``'s spellings: ``at`` as ``turns:N`` /
        ``tokens:N``, ``strategy`` by name (with ``keep``) or as an object."""
        threshold = CompactAt.parse(at) if isinstance(at, str) else at
        chosen = make_strategy(strategy, keep=keep) if isinstance(strategy, str) else strategy
        return cls(threshold, chosen, summarizer)


def check_combination(
    compaction: CompactionConfig | None, *, tree: bool, gold_restarts: bool, turn_loop: bool
) -> None:
    """:class:`InvalidRequest` for what compaction is not combined with in this release:
    tree rollouts, gold-prefix restarts, and external agents (their own loop keeps their
    own context)."""
    if compaction is None:
        return
    for used, what in ((tree, "--tree"), (gold_restarts, "--gold-restart-after"),
                       (turn_loop, "--agent")):  # fmt: skip
        if used:
            raise InvalidRequest(
                f"context compaction is not combined with {what} in this release: drop "
                f"{what} or --compact-at"
            )
