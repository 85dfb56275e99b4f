"""A scripted OpenAI-compatible chat server whose weights have a version that can change.

The stand-in for an inference server during weight updates, served by a real uvicorn on
127.0.0.1 (:class:`~tests.rollout.scripted_server.ThreadedUvicorn`). Each turn of the
script (``CALC_SCRIPT``) is sampled one character-token at a time, ``token_latency_s``
apart (a ``slow_fraction`` of requests ``slow_factor`` times slower), so requests are in
flight when an update comes. Every reply carries the version in ``X-Weight-Version``,
token ids (``return_token_ids``) and logprobs that encode the version (``-(version +
1) / 10``), so a test can tell which weights sampled each token.

Token ids: a message is the bytes of ``role|content`` (an assistant message: its content
then its rendered tool calls), so consecutive prompts extend each other and a turn's
completion ids are exactly its assistant message. The assistant text of a turn is
``thinking(turn)`` then its tool calls; an abort can cut the thinking, and the tool calls
come with the last segment.

Control endpoints, SGLang's: ``POST /pause_generation`` (``mode`` ``abort``: the running
requests return what they sampled with ``finish_reason "abort"``; ``in_place``: they stall
until continued), ``POST /update_weights_from_disk`` (``weight_version``; waits
``load_s``; fails while ``fail_updates`` > 0), ``POST /continue_generation``, ``GET
/get_model_info``; vLLM's: ``POST /pause?mode=abort|wait``, ``POST /collective_rpc``
(``reload_weights``: the next version), ``POST /resume``. ``continue_final_message``
continues a partial assistant message (it must be a prefix of the turn's text).
``GET /stats`` and :class:`VersionStats` count segments, sampled tokens per version,
aborts, and ``mixed``: tokens sampled after the version changed under a running request
whose client still waits for it (a correct update protocol keeps it 0); ``load_bodies``
are the bodies ``/update_weights_from_disk`` received. ``GET /v1/models`` lists the model, with the
version in ``models_field`` when :class:`VersionConfig` names one (counted in
``models_requests``); ``header=False`` leaves ``X-Weight-Version`` off the replies.

Token in, token out (``tokenizer`` given): vLLM's ``POST /v1/completions`` with the prompt
as ids samples the turn's hermes-style text (``tito_text``) plus EOS, tokenised with that
tokenizer; a prompt that already ends with part of it (after the last assistant header)
continues from there.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
from fastapi import FastAPI, Request, Response
from starlette.requests import ClientDisconnect

from tests.rollout.scripted_server import CALC_SCRIPT, ThreadedUvicorn

HEADER = "X-Weight-Version"
T = TypeVar("T")


def thinking(turn: int) -> str:
    return f"step {turn}: I will use the tool now."


def tito_text(turn: int) -> str:
    """What the token-in model samples at ``turn``: thinking, then a hermes tool call."""
    step = CALC_SCRIPT[turn] if turn < len(CALC_SCRIPT) else None
    if step is None:
        return "done"
    call = step["tool_calls"][0]
    body = json.dumps({"name": call["name"], "arguments": json.loads(call["arguments"])})
    return f"{thinking(turn)}\n<tool_call>\n{body}\n</tool_call>"


def render_calls(calls: list[dict[str, Any]]) -> str:
    parts = []
    for call in calls:
        function = call.get("function", call)
        parts.append(f"<tool_call>{function.get('name')}({function.get('arguments')})</tool_call>")
    return "".join(parts)


def message_ids(message: dict[str, Any]) -> list[int]:
    if message.get("role") == "assistant":
        text = (message.get("content") or "") + render_calls(message.get("tool_calls") or [])
    else:
        text = f"{message.get('role')}|{message.get('content') or ''}"
    return list(text.encode())


@dataclass
class VersionConfig:
    version: int = 0
    token_latency_s: float = 0.002
    slow_fraction: float = 0.0
    slow_factor: float = 4.0
    load_s: float = 0.0
    fail_updates: int = 0
    seed: int = 0
    models_field: str | None = None  # GET /v1/models reports the version in this field
    header: bool = True  # replies carry X-Weight-Version


@dataclass
class VersionStats:
    segments: int = 0
    continuations: int = 0
    aborted: int = 0
    aborted_partial: int = 0  # aborted after sampling something: only these are continued
    inflight: int = 0
    inflight_sampled: int = 0  # in flight and past their first token: an abort splits these
    max_inflight: int = 0
    mixed: int = 0
    disconnected: int = 0
    tokens_by_version: Counter[int] = field(default_factory=Counter)
    budgets: set[int] = field(default_factory=set)  # chat max_tokens + tokens continued
    updates: list[int] = field(default_factory=list)
    failed_updates: int = 0
    load_bodies: list[dict[str, Any]] = field(default_factory=list)
    models_requests: int = 0


class _Server:
    def __init__(self, config: VersionConfig, stats: VersionStats, tokenizer: Any) -> None:
        self.config = config
        self.stats = stats
        self.tokenizer = tokenizer
        self.rng = random.Random(config.seed)
        self.abort_epoch = 0  # bumped by an abort: running requests stop at their next token
        self.paused = False
        self.resumed: asyncio.Event | None = None

    async def chat(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        messages = body.get("messages") or []
        continuing = bool(body.get("continue_final_message")) and (
            messages and messages[-1].get("role") == "assistant"
        )
        history = messages[:-1] if continuing else messages
        turn = sum(1 for m in history if m.get("role") == "assistant")
        step = CALC_SCRIPT[turn] if turn < len(CALC_SCRIPT) else {}
        text = thinking(turn) if step else "done"
        done = messages[-1].get("content") or "" if continuing else ""
        if not text.startswith(done):
            error = {"error": {"message": "the partial message is not this turn's prefix"}}
            return Response(orjson.dumps(error), status_code=400)
        self.stats.segments += 1
        self.stats.continuations += bool(continuing)
        if "max_tokens" in body:
            self.stats.budgets.add(body["max_tokens"] + len(done.encode()))
        self.stats.inflight += 1
        self.stats.max_inflight = max(self.stats.max_inflight, self.stats.inflight)
        try:
            chars, version, aborted = await self._sample(text[len(done) :], request)
        except ClientDisconnect:  # the client cancelled it: like vLLM, stop sampling
            return Response(status_code=499)
        finally:
            self.stats.inflight -= 1
        sampled = "".join(chars)
        calls = [] if aborted else list(step.get("tool_calls") or [])
        message: dict[str, Any] = {"role": "assistant", "content": sampled}
        if calls:
            message["tool_calls"] = [
                {"id": f"call_{turn}_{i}", "type": "function", "function": dict(c)}
                for i, c in enumerate(calls)
            ]
        ids = list(sampled.encode()) + list(render_calls(calls).encode())
        self.stats.tokens_by_version[version] += len(ids)
        prompt_ids = [t for m in history for t in message_ids(m)] + list(done.encode())
        reply = {
            "id": f"chatcmpl-{self.stats.segments}",
            "object": "chat.completion",
            "model": body.get("model", ""),
            "prompt_token_ids": prompt_ids,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "abort" if aborted else ("tool_calls" if calls else "stop"),
                    "token_ids": ids,
                    "logprobs": {"content": [{"logprob": -(version + 1) / 10} for _ in ids]},
                }
            ],
            "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": len(ids)},
        }
        return self._reply(reply, version)

    def _reply(self, reply: dict[str, Any], version: int) -> Response:
        headers = {HEADER: str(version)} if self.config.header else None
        return Response(orjson.dumps(reply), media_type="application/json", headers=headers)

    async def completions(self, request: Request) -> Response:
        """vLLM's token-in ``/v1/completions`` (see the module docstring)."""
        body = orjson.loads(await request.body())
        prompt: list[int] = body["prompt"]
        header = self.tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
        starts = [i for i in range(len(prompt)) if prompt[i : i + len(header)] == header]
        if not starts:
            return Response(b'{"error": "no assistant header"}', status_code=400)
        turn = len(starts) - 1
        full = self.tokenizer.encode(tito_text(turn), add_special_tokens=False)
        full.append(self.tokenizer.eos_token_id)
        done = prompt[starts[-1] + len(header) :]
        if full[: len(done)] != done:
            return Response(b'{"error": "not a prefix of the turn"}', status_code=400)
        self.stats.segments += 1
        self.stats.continuations += bool(done)
        self.stats.inflight += 1
        self.stats.max_inflight = max(self.stats.max_inflight, self.stats.inflight)
        try:
            ids, version, aborted = await self._sample(full[len(done) :], request)
        except ClientDisconnect:
            return Response(status_code=499)
        finally:
            self.stats.inflight -= 1
        self.stats.tokens_by_version[version] += len(ids)
        choice = {
            "index": 0,
            "text": self.tokenizer.decode(ids),
            "token_ids": ids,
            "logprobs": {"token_logprobs": [-(version + 1) / 10 for _ in ids]},
            "finish_reason": "abort" if aborted else "stop",
        }
        reply = {"id": "cmpl", "object": "text_completion", "choices": [choice]}
        return self._reply(reply, version)

    async def _sample(self, items: Sequence[T], request: Request) -> tuple[list[T], int, bool]:
        """Sample ``items`` one at a time; stops early when aborted, and raises
        ``ClientDisconnect`` when the client went away."""
        config = self.config
        version, epoch = config.version, self.abort_epoch
        delay = config.token_latency_s
        if config.slow_fraction and self.rng.random() < config.slow_fraction:
            delay *= config.slow_factor
        sampled: list[T] = []
        mixed = 0  # counted only for a reply the client waits for (a gone one is moot)
        try:
            for item in items:
                await asyncio.sleep(delay)
                while self.paused and self.abort_epoch == epoch and self.resumed is not None:
                    await self.resumed.wait()
                if self.abort_epoch != epoch:
                    self.stats.aborted += 1
                    self.stats.aborted_partial += bool(sampled)
                    self.stats.mixed += mixed
                    return sampled, version, True
                if await request.is_disconnected():
                    self.stats.disconnected += 1
                    raise ClientDisconnect
                mixed += config.version != version
                sampled.append(item)
                self.stats.inflight_sampled += len(sampled) == 1
        finally:
            self.stats.inflight_sampled -= bool(sampled)
        if mixed and await _gone(request):
            self.stats.disconnected += 1  # cancelled client-side just before the update
            raise ClientDisconnect
        self.stats.mixed += mixed
        return sampled, version, False

    def abort(self) -> None:
        self.abort_epoch += 1

    def pause(self) -> None:
        self.resumed = self.resumed or asyncio.Event()
        self.resumed.clear()
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        if self.resumed is not None:
            self.resumed.set()

    async def load(self, version: int) -> dict[str, Any]:
        await asyncio.sleep(self.config.load_s)
        if self.config.fail_updates > 0:
            self.config.fail_updates -= 1
            self.stats.failed_updates += 1
            return {"success": False, "message": "injected: checkpoint not found"}
        self.config.version = version
        self.stats.updates.append(version)
        return {"success": True, "message": "ok", "num_paused_requests": 0}


async def _gone(request: Request, grace_s: float = 0.5) -> bool:
    """Whether the client went away, allowing ``grace_s`` for its disconnect to reach the
    server: a request the gate cancelled on the client side (``NoopSync``) can sample its
    last tokens under the new version before the server sees the connection close, and
    those tokens reach no one, so they are not a reply sampled across an update."""
    deadline = asyncio.get_running_loop().time() + grace_s
    while not await request.is_disconnected():
        if asyncio.get_running_loop().time() >= deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def create_app(config: VersionConfig, stats: VersionStats, tokenizer: Any = None) -> FastAPI:
    app = FastAPI()
    server = _Server(config, stats, tokenizer)
    app.router.add_route("/v1/chat/completions", server.chat, methods=["POST"])
    app.router.add_route("/v1/completions", server.completions, methods=["POST"])

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        stats.models_requests += 1
        entry: dict[str, Any] = {"id": "scripted", "object": "model"}
        if config.models_field is not None:
            entry[config.models_field] = str(config.version)
        return {"object": "list", "data": [entry]}

    @app.post("/pause_generation")
    async def pause_generation(request: Request) -> dict[str, Any]:
        mode = (await request.json()).get("mode", "abort")
        server.abort() if mode == "abort" else server.pause()
        return {}

    @app.post("/update_weights_from_disk")
    async def update_weights_from_disk(request: Request) -> dict[str, Any]:
        body = await request.json()
        stats.load_bodies.append(body)
        return await server.load(int(body["weight_version"]))

    @app.post("/continue_generation")
    async def continue_generation() -> dict[str, Any]:
        server.resume()
        return {}

    @app.get("/get_model_info")
    async def get_model_info() -> dict[str, Any]:
        return {"model_path": "scripted", "weight_version": str(config.version)}

    @app.post("/pause")
    async def pause(mode: str = "abort") -> dict[str, Any]:
        server.abort() if mode == "abort" else server.pause()  # envhub drains before "wait"
        return {}

    @app.post("/collective_rpc")
    async def collective_rpc(request: Request) -> Response:
        body = await request.json()
        if body.get("method") != "reload_weights":
            return Response(json.dumps({"error": "unknown method"}), status_code=400)
        reply = await server.load(config.version + 1)
        return Response(json.dumps(reply), status_code=200 if reply["success"] else 500)

    @app.post("/resume")
    async def resume() -> dict[str, Any]:
        server.resume()
        return {}

    @app.get("/stats")
    async def get_stats() -> dict[str, Any]:
        return {
            "segments": stats.segments,
            "aborted": stats.aborted,
            "inflight": stats.inflight,
            "mixed": stats.mixed,
            "tokens_by_version": dict(stats.tokens_by_version),
        }

    return app


class VersionedServer(ThreadedUvicorn):
    """The versioned server in a thread; ``base_url`` ends in ``/v1``."""

    def __init__(
        self, config: VersionConfig | None = None, port: int = 0, tokenizer: Any = None
    ) -> None:
        self.config = config or VersionConfig()
        self.stats = VersionStats()
        super().__init__(create_app(self.config, self.stats, tokenizer), port)
        self.base_url = f"{self.url}/v1"
