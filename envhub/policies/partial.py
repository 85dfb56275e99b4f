"""Model calls that a weight update splits: resuming a partial completion, joining segments.

An ``abort-and-resume`` weight update (:mod:`envhub.policies.gate`) ends a request in
flight early: the server returns what it sampled so far (``finish_reason "abort"``), or
the gate cancels the request and nothing comes back. :func:`until_complete` then waits
for the update, asks again *continuing the partial completion* (how depends on the API:
the chat policy resends the conversation with the partial assistant message and
``continue_final_message``; a token-in policy appends the partial ids to the prompt), and
repeats until a segment ends for another reason. :func:`join_segments` makes one
:class:`~envhub.policies.base.Completion` of the segments, in which every sampled token
keeps the weight version that sampled it (``completion_versions``, set only when the
versions differ), so that a trainer can weight each token by its own importance ratio.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from envhub.policies.base import Completion
from envhub.policies.gate import GenerationAborted, GenerationGate

__all__ = ["ABORTED", "join_segments", "sampled_tokens", "tokens_left", "until_complete"]

ABORTED = "abort"
"""The ``finish_reason`` of a request the server aborted (vLLM and SGLang both use it)."""

Reply = tuple[dict[str, Any], Completion]


async def until_complete(
    gate: GenerationGate | None, request: Callable[[list[Completion]], Awaitable[Reply]]
) -> Reply:
    """Call ``request(partial_segments)`` until a segment is not aborted; returns the last
    reply (as the server sent it) and the joined completion. ``request`` gets the segments
    sampled so far (empty at first), must continue them, and sends each attempt through
    the gate (:meth:`GenerationGate.request`, so that a retry waits out an update too).
    Each segment records the weight version its server reported or, failing that, the
    gate's: no update completes while a request is in flight, so the version when the
    request returns is the one that served it. Without a gate this is one plain request."""
    if gate is None:
        return await request([])
    segments: list[Completion] = []
    while True:
        try:
            reply, segment = await request(list(segments))
        except GenerationAborted:  # cancelled on the client side: nothing came back
            reply, segment = {}, Completion(content=None, tool_calls=[], finish_reason=ABORTED)
        if segment.weight_version is None:
            segment.weight_version = gate.version
        segments.append(segment)
        if segment.finish_reason != ABORTED:
            return reply, join_segments(segments)
        await gate.resume_point()  # raises GenerationDropped under abort-and-drop


def sampled_tokens(segments: list[Completion]) -> int:
    """How many tokens ``segments`` sampled (their ids, else the usage they reported)."""
    return sum(
        len(s.completion_token_ids) if s.completion_token_ids is not None else s.completion_tokens
        for s in segments
    )


def tokens_left(max_tokens: int, done: int) -> int:
    """The token limit of a request continuing ``done`` sampled tokens under ``max_tokens``
    (at least 1: servers refuse 0, and the continuation then ends at once by length)."""
    return max(1, max_tokens - done)


def join_segments(segments: list[Completion]) -> Completion:
    """One completion from consecutive segments of one model call (see the module
    docstring). Token ids and logprobs are joined when every segment that sampled
    something has them (a segment cut before it sampled anything has none to give);
    ``weight_version`` is the first segment's (the oldest), ``completion_versions`` one
    version per sampled token when the segments' versions differ."""
    if len(segments) == 1:
        return segments[0]
    sampled = [s for s in segments if s.content or s.tool_calls or s.completion_token_ids]
    ids = _joined([s.completion_token_ids for s in sampled])
    logprobs = _joined([s.completion_logprobs for s in sampled])
    versions = None
    if ids is not None and len({s.weight_version for s in sampled}) > 1:
        versions = [
            s.weight_version if s.weight_version is not None else -1
            for s in sampled
            for _ in s.completion_token_ids or []
        ]
    texts = [s.content for s in segments if s.content is not None]
    first, last = (sampled or segments)[0], segments[-1]
    return Completion(
        content="".join(texts) if texts else None,
        tool_calls=[call for s in segments for call in s.tool_calls],
        finish_reason=last.finish_reason,
        prompt_token_ids=next(
            (s.prompt_token_ids for s in segments if s.prompt_token_ids is not None), None
        ),
        completion_token_ids=ids,
        completion_logprobs=logprobs,
        prompt_tokens=next((s.prompt_tokens for s in segments if s.prompt_tokens), 0),
        completion_tokens=sum(s.completion_tokens for s in segments),
        endpoint=last.endpoint,
        weight_version=first.weight_version,
        completion_versions=versions,
    )


def _joined(parts: list[list[Any] | None]) -> list[Any] | None:
    if any(part is None for part in parts):
        return None
    return [item for part in parts for item in part or []]
