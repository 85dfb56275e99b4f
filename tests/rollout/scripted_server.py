"""A scripted OpenAI-compatible chat server: the stand-in for a remote LLM in tests.

A real FastAPI app served by a real uvicorn on 127.0.0.1. Each reply follows a script
indexed by the turn (the number of assistant messages in the request), with optional
vLLM-style token ids and logprobs, injected latency (with a slow tail), and injected
faults consumed one per request: ``"500"``, ``"429"``, ``"hang"`` (sleeps ``hang_s``),
``"malformed"`` (a tool call whose arguments are not JSON), ``"garbled"`` (text no
verdict parser takes, as a confused judge writes). It counts requests and those
in flight (``GET /stats``, which the saturation benchmark samples), counts requests per
session id header (``X-Session-ID``), and with ``record_bodies`` keeps each request body
(what the policy sent: messages, tools). A request that offers no tools (a judge's, a
context compaction's summary call, a one-message episode's) is answered by ``judge``
where there is one (a function of the request's messages: a judge whose verdict depends
on what it is asked, whatever the order of concurrent requests), else from ``replies``
where there are some: the next one, the last kept for the rest. With a
:class:`PrefixCache` it models a server's automatic prefix cache: prompt tokens it has
not cached add latency (``us_per_token`` each) and are counted as recomputed (the
prefix-affinity benchmark and sticky-routing tests compare routings by them).

In-process: ``with ScriptedServer(ScriptConfig(...)) as server: server.base_url``.
As a process (benchmarks): ``python tests/rollout/scripted_server.py --port 8123``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import uvicorn
from fastapi import FastAPI, Request, Response
from starlette.requests import ClientDisconnect

from envhub._util.asgi import ServerThread

CALC_SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [{"name": "calculate", "arguments": '{"expression": "2 + 3"}'}]},
    {"tool_calls": [{"name": "calculate", "arguments": '{"expression": "5 * 4"}'}]},
    {"tool_calls": [{"name": "answer", "arguments": '{"value": "20"}'}]},
]
"""Three turns on ``calc``: two calculations, then a (usually wrong) terminal answer."""


def calc_script(turns: int) -> list[dict[str, Any]]:
    """``turns`` turns on ``calc``: calculations, then a terminal answer."""
    calls = [
        {"tool_calls": [{"name": "calculate", "arguments": f'{{"expression": "{i} * 7"}}'}]}
        for i in range(1, turns)
    ]
    return [*calls, {"tool_calls": [{"name": "answer", "arguments": '{"value": "7"}'}]}]


MALFORMED_CALL = {"name": "calculate", "arguments": '{"expression": "2 +'}


@dataclass
class ScriptConfig:
    turns: list[dict[str, Any]] = field(default_factory=lambda: list(CALC_SCRIPT))
    latency_s: float = 0.0
    tail_latency_s: float = 0.0
    tail_fraction: float = 0.0
    token_ids: bool = False
    break_prefix_at_turn: int | None = None
    faults: deque[str] = field(default_factory=deque)
    hang_s: float = 30.0
    reject_token_fields: bool = False  # answer 400 to vLLM's fields, as OpenAI's API does
    record_bodies: bool = False  # keep every request body in ServerStats.bodies
    prefix_cache: PrefixCache | None = None
    distinct_samples: bool = False  # a random note in each reply, as sampling would differ
    session_header: str = "x-session-id"
    seed: int = 0
    # contents answering the requests that offer no tools, in order (the last one repeats)
    replies: deque[str] = field(default_factory=deque)
    # answers the requests that offer no tools from their messages (before ``replies``)
    judge: Callable[[list[dict[str, Any]]], str] | None = None


@dataclass
class ServerStats:
    requests: int = 0
    inflight: int = 0
    max_inflight: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    models: Counter[str] = field(default_factory=Counter)
    token_fields_requested: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)
    sessions: Counter[str] = field(default_factory=Counter)  # requests per session header

    def enter(self) -> None:
        self.requests += 1
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)

    def leave(self) -> None:
        self.inflight -= 1

    def snapshot(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "inflight": self.inflight,
            "max_inflight": self.max_inflight,
            "faults": dict(self.faults),
            "models": dict(self.models),
            "token_fields_requested": self.token_fields_requested,
            "sessions": len(self.sessions),
        }


class PrefixCache:
    """A model server's automatic prefix cache (vLLM's block hashes, SGLang's radix tree)
    in ``block_size``-token blocks: the leading full blocks of a prompt whose chained hash
    is cached are not recomputed. A served request caches its prompt's and completion's
    blocks (the next turn's prompt starts with both); the least recently used blocks are
    evicted beyond ``capacity_tokens``. Each recomputed prompt token costs ``us_per_token``
    microseconds of latency. The counts are also kept per turn (the assistant messages
    in the prompt), so a benchmark can tell the turns where episodes fork apart."""

    def __init__(
        self, *, us_per_token: float = 0.0, block_size: int = 16, capacity_tokens: int = 1 << 22
    ) -> None:
        self.us_per_token = us_per_token
        self.block_size = block_size
        self.capacity_blocks = capacity_tokens // block_size
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.requests = self.hits = self.prompt_tokens = self.cached_tokens = 0
        self.by_turn: dict[int, list[int]] = {}  # turn -> [prompt tokens, cached tokens]

    def _hashes(self, ids: list[int]) -> list[int]:
        chained, hashes = 0, []
        for start in range(0, len(ids) - self.block_size + 1, self.block_size):
            chained = hash((chained, *ids[start : start + self.block_size]))
            hashes.append(chained)
        return hashes

    def lookup(self, prompt_ids: list[int], turn: int = 0) -> float:
        """Count the prompt's cached and recomputed tokens (at ``turn``); the seconds the
        recomputation costs."""
        cached = 0
        for block in self._hashes(prompt_ids):
            if block not in self._blocks:
                break
            self._blocks.move_to_end(block)
            cached += self.block_size
        self.requests += 1
        self.hits += cached > 0
        self.prompt_tokens += len(prompt_ids)
        self.cached_tokens += cached
        counts = self.by_turn.setdefault(turn, [0, 0])
        counts[0] += len(prompt_ids)
        counts[1] += cached
        return (len(prompt_ids) - cached) * self.us_per_token / 1e6

    def insert(self, ids: list[int]) -> None:
        for block in self._hashes(ids):
            self._blocks[block] = None
            self._blocks.move_to_end(block)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)

    def clear(self) -> None:
        self._blocks.clear()
        self.requests = self.hits = self.prompt_tokens = self.cached_tokens = 0
        self.by_turn.clear()

    def snapshot(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "hits": self.hits,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "recomputed_tokens": self.prompt_tokens - self.cached_tokens,
            "by_turn": {str(turn): list(counts) for turn, counts in sorted(self.by_turn.items())},
        }


def tokenize(message: dict[str, Any]) -> list[int]:
    """A deterministic stand-in tokenizer (bytes of the message's role, text and calls), so
    that consecutive prompts extend each other exactly as with a real chat template."""
    parts = [message.get("role", ""), message.get("content") or ""]
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        parts.append(f"{function.get('name')}({function.get('arguments')})")
    if message.get("role") == "tool":
        parts.append(message.get("tool_call_id", ""))
    return list("|".join(parts).encode())


def _sse(reply: dict[str, Any]) -> bytes:
    """``reply`` as an OpenAI chat stream (``"stream": true``, as verifiers' harnesses ask):
    one chunk with the whole message as its delta, one with the finish reason and usage,
    then ``[DONE]``."""
    choice = reply["choices"][0]
    message = choice["message"]
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
    head = {"id": reply["id"], "object": "chat.completion.chunk", "created": reply["created"],
            "model": reply["model"]}
    chunks = [
        {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}],
         "usage": reply["usage"]},
    ]
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def create_app(config: ScriptConfig, stats: ServerStats) -> FastAPI:
    app = FastAPI()
    rng = random.Random(config.seed)

    async def chat(request: Request) -> Response:
        stats.enter()
        session = request.headers.get(config.session_header)
        if session is not None:
            stats.sessions[session] += 1
        try:
            return await _reply(orjson.loads(await request.body()))
        except ClientDisconnect:  # the client gave up (timeout, killed): nobody to answer
            return Response(status_code=499)
        finally:
            stats.leave()

    # a plain Starlette route: FastAPI's request-model machinery would make this stand-in
    # slower than the harness it is meant to measure
    app.router.add_route("/v1/chat/completions", chat, methods=["POST"])

    async def _reply(body: dict[str, Any]) -> Response:
        stats.models[body.get("model", "")] += 1
        if config.record_bodies:
            stats.bodies.append(body)
        if body.get("return_token_ids"):
            stats.token_fields_requested += 1
            if config.reject_token_fields:
                error = {
                    "error": {"message": "Unrecognized request argument supplied: return_token_ids"}
                }
                return Response(orjson.dumps(error), status_code=400)
        fault = config.faults.popleft() if config.faults else None
        if fault:
            stats.faults[fault] += 1
        if fault in ("500", "429"):
            return Response(
                orjson.dumps({"error": {"message": f"injected {fault}"}}), status_code=int(fault)
            )
        if fault == "context":  # vLLM's wording
            message = ("This model's maximum context length is 2048 tokens. However, you "
                       "requested 2100 tokens (2000 in the messages, 100 in the completion).")
            return Response(orjson.dumps({"error": {"message": message}}), status_code=400)
        messages = body.get("messages") or []
        delay = config.latency_s
        if config.tail_fraction and rng.random() < config.tail_fraction:
            delay = config.tail_latency_s
        if fault == "hang":
            delay = config.hang_s
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        cache = config.prefix_cache
        if cache is not None:
            prompt_ids = [token for m in messages for token in tokenize(m)]
            delay += cache.lookup(prompt_ids, turn)
        if delay:
            await asyncio.sleep(delay)
        step = config.turns[turn] if turn < len(config.turns) else {"content": "done"}
        if config.judge is not None and not body.get("tools"):  # a judge reading its prompt
            step = {"content": config.judge(messages)}
        elif config.replies and not body.get("tools"):  # a judge's, a summarizer's answer
            reply = config.replies.popleft() if len(config.replies) > 1 else config.replies[0]
            step = {"content": reply}
        if fault == "garbled":
            step = {"content": "(garbled)"}
        calls = [MALFORMED_CALL] if fault == "malformed" else step.get("tool_calls") or []
        content = step.get("content")
        if config.distinct_samples:
            content = f"{content or ''}(note {rng.getrandbits(48):012x})"
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = [
                {"id": f"call_{turn}_{i}", "type": "function", "function": dict(c)}
                for i, c in enumerate(calls)
            ]
        if cache is not None:
            cache.insert(prompt_ids + tokenize(message))
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "finish_reason": "tool_calls" if calls else "stop",
        }
        reply: dict[str, Any] = {
            "id": f"chatcmpl-{stats.requests}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", ""),
            "choices": [choice],
            "usage": {"prompt_tokens": 10 * len(messages), "completion_tokens": 7,
                      "total_tokens": 10 * len(messages) + 7},
        }
        if config.token_ids and body.get("return_token_ids"):
            prompt_ids = [token for m in messages for token in tokenize(m)]
            if config.break_prefix_at_turn == turn:
                prompt_ids.insert(0, 1)  # a re-rendered history: the prefix no longer matches
            completion_ids = tokenize(message)
            reply["prompt_token_ids"] = prompt_ids
            choice["token_ids"] = completion_ids
            choice["logprobs"] = {
                "content": [
                    {"token": chr(t), "logprob": -(i % 7) / 10, "bytes": [t], "top_logprobs": []}
                    for i, t in enumerate(completion_ids)
                ]
            }
        if body.get("stream"):
            return Response(_sse(reply), media_type="text/event-stream")
        return Response(orjson.dumps(reply), media_type="application/json")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": "scripted", "object": "model"}]}

    @app.get("/stats")
    async def get_stats() -> dict[str, Any]:
        snapshot = stats.snapshot()
        if config.prefix_cache is not None:
            snapshot["prefix_cache"] = config.prefix_cache.snapshot()
        return snapshot

    return app


class ThreadedUvicorn(ServerThread):
    """Any ASGI app under a real uvicorn in a background thread on 127.0.0.1 (port 0: free),
    with the tests' defaults: no lifespan unless asked for, a 1 s graceful shutdown."""

    def __init__(self, app: Any, port: int = 0, lifespan: str = "off") -> None:
        super().__init__(app, port=port, lifespan=lifespan, timeout_graceful_shutdown=1)


class ScriptedServer(ThreadedUvicorn):
    """The scripted model server in a thread; ``base_url`` ends in ``/v1``."""

    def __init__(self, config: ScriptConfig | None = None, port: int = 0) -> None:
        self.config = config or ScriptConfig()
        self.stats = ServerStats()
        super().__init__(create_app(self.config, self.stats), port)
        self.base_url = f"{self.url}/v1"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--tail-latency", type=float, default=0.0)
    parser.add_argument("--tail-fraction", type=float, default=0.0)
    parser.add_argument("--token-ids", action="store_true")
    parser.add_argument("--calc-turns", type=int, help="calc_script(N) (default: CALC_SCRIPT)")
    parser.add_argument("--distinct-samples", action="store_true")
    parser.add_argument(
        "--reply",
        action="append",
        default=[],
        help="answer requests that offer no tools with this (repeat: in order, the last kept)",
    )
    parser.add_argument(
        "--prefix-cache-us-per-token",
        type=float,
        default=None,
        help="model a prefix cache; each recomputed prompt token costs this many microseconds",
    )
    args = parser.parse_args()
    config = ScriptConfig(
        latency_s=args.latency,
        tail_latency_s=args.tail_latency,
        tail_fraction=args.tail_fraction,
        token_ids=args.token_ids,
        turns=list(CALC_SCRIPT) if args.calc_turns is None else calc_script(args.calc_turns),
        distinct_samples=args.distinct_samples,
        replies=deque(args.reply),
        prefix_cache=None
        if args.prefix_cache_us_per_token is None
        else PrefixCache(us_per_token=args.prefix_cache_us_per_token),
    )
    uvicorn.run(
        create_app(config, ServerStats()),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
        backlog=8192,
        limit_concurrency=None,
    )


if __name__ == "__main__":
    main()
