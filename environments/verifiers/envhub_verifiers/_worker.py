"""The verifiers side of the bridge: a process started with the verifiers venv's Python.

It imports only the standard library and verifiers (whose pins clash with envhub's, so
the two never share an interpreter), loads a taskset with verifiers' own loader, and
answers one JSON object per line on the file descriptor it was handed (the real stdout;
``print`` in verifiers or taskset code goes to stderr and cannot corrupt the protocol):

- ``load``: the tasks (``Task.key`` as the id, the prompt as chat messages) and the tools
  of the taskset's and its tasks' toolsets, named as verifiers' chat harness names them
  (``<server>_<tool>``), with the JSON schemas the MCP server derives from them;
- ``open``/``call``/``close``: one episode's own task toolset instances (verifiers starts
  task toolsets per rollout; here each episode gets fresh instances), calls dispatched
  through an in-process ``MCPServer`` built as verifiers' ``Toolset`` builds it;
- ``score``: a ``Trace`` rebuilt from the transcript the bridge holds, through the
  graph API verifiers' interception records model calls with (``prepare_turn(...)
  .commit(response)``), scored by ``Task.score``: the task's ``@vf.reward`` functions
  and judges with their weights, as verifiers scores.

Isolation: reward functions may parse or ``eval`` the model's text, or keep module
state, so this process, warm with verifiers and the taskset loaded, never scores. Each
``score`` runs in a child forked for that request alone by envhub's
:mod:`envhub.sandboxes.disposable_child` (loaded by the path the bridge passes: this
interpreter has no envhub), as Reasoning Gym's scorer does: the child cannot reach this
process's request or reply pipes, runs under CPU and file-size limits, dies with this
process, and is killed with its process group after its one reply, which is accepted
only well formed and then checked here (:func:`_checked`). Whatever an answer did in the
child is gone before the next score. What code that runs in the child can still do is
forge its own episode's reward, and act as this process's user on the host (no sandbox
beyond the limits above).

Tool calls run here, in each episode's own toolset instances (taskset-level toolsets are
shared, as verifiers shares them across rollouts): a toolset that keeps module state or
runs the model's arguments as code shares that state with other episodes' tools. Their
results reach a reward only through the transcript, which is scored in a child.

Errors come back as ``{"error": {"kind", "message"}}``: ``tool`` (the model's call
failed: an observation), ``reward`` (a reward function raised: the episode is masked,
not scored 0), ``judge`` (a judge's endpoint failed or it gave no verdict: masked as a
judge failure), ``request`` (the bridge asked for something unknown), ``load``.

Judges (plugged in the task config, or called by a reward function) run in the scoring
child like every reward: their HTTP call to the endpoint their config names leaves from
the child, which keeps its limits (nothing in the confinement above closes the network;
the call counts against ``score_timeout_s``).
"""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import math
import os
import runpy
import sys
import time
import traceback
from types import SimpleNamespace
from typing import Any

_PROTO_FD = os.dup(1)
os.dup2(2, 1)  # stdout of verifiers and user code goes to stderr from here on


def _log(*parts: object) -> None:
    print("envhub-verifiers worker:", *parts, file=sys.stderr, flush=True)


class _Failure(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


_MAX_REPLY_BYTES = 1 << 20
_MAX_MESSAGE = 2000
_CHILD_ERRORS = {
    "timeout": "scoring ran past score_timeout_s",
    "stalled": "the scoring process stopped making progress (blocked, or a stalled machine)",
    "died": "the scoring process died",
    "unexpected": "the scoring process sent an unexpected reply",
}


async def _score(task: Any, tools: list[dict[str, Any]],
                 messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The verifiers side of a score: a ``Trace`` rebuilt from the transcript, through
    the graph API verifiers' interception records model calls with, scored by
    ``Task.score``. Runs in the scoring child only."""
    import verifiers.v1 as vf
    from verifiers.v1.dialects.chat import parse_message, parse_tools
    from verifiers.v1.graph import prepare_turn

    trace = _empty_trace(task)
    parsed_tools = parse_tools([{"type": "function", "function": t} for t in tools]) or []
    parsed = [parse_message(m) for m in messages]
    now = int(time.time())
    for i, message in enumerate(parsed):
        if message.role == "assistant":
            response = vf.Response(id=f"envhub-{i}", created=now, model="envhub",
                                   message=message, finish_reason="stop")
            prepare_turn(trace, parsed[:i], parsed_tools).commit(response)
    trace.is_completed = True
    trace.ok = True
    try:
        await task.score(trace)
    except Exception as exc:
        cause = exc.__cause__ or exc
        kind = "judge" if _from_judge(cause) else "reward"
        return {"error": {"kind": kind, "message": f"{type(cause).__name__}: {cause}"}}
    components = {}
    weights = {}
    for name, reward in trace.rewards.items():
        if reward is None:
            return {"error": {"kind": "reward", "message": f"reward {name!r} did not run"}}
        components[name] = reward.score
        weights[name] = reward.weight
    return {"reward": trace.reward, "components": components, "weights": weights,
            "metrics": {k: v for k, v in trace.metrics.items() if v is not None}}


def _from_judge(exc: BaseException) -> bool:
    """Whether a scoring failure came out of a verifiers judge: its endpoint failed (down,
    an HTTP error: verifiers' judge client makes one attempt) or its reply held no verdict
    (verifiers raises then, "so judge failures are not scored against the model"). Told
    by a ``vf.Judge`` method among the frames the exception (or one it was raised from)
    went through, so it holds for plugged judges and for judges a reward function calls."""
    from verifiers.v1 import Judge

    seen: set[int] = set()
    pending: BaseException | None = exc
    while pending is not None and id(pending) not in seen:
        seen.add(id(pending))
        frame = pending.__traceback__
        while frame is not None:
            if isinstance(frame.tb_frame.f_locals.get("self"), Judge):
                return True
            frame = frame.tb_next
        pending = pending.__cause__ or pending.__context__
    return False


def _score_child(task: Any, tools: list[dict[str, Any]],
                 messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The reply of a score, in the forked child (the worker's loop is not its own)."""
    asyncio.events._set_running_loop(None)
    return asyncio.run(_score(task, tools, messages))


def _checked(reply: dict[str, Any]) -> dict[str, Any]:
    """A score reply of the right shape, finite numbers only, else a ``reward`` failure:
    the bridge takes nothing from the child it did not check."""
    def number(value: object) -> bool:
        return (isinstance(value, int | float) and not isinstance(value, bool)
                and math.isfinite(value))

    tables = [reply.get(k) for k in ("components", "weights", "metrics")]
    if not (number(reply.get("reward")) and all(
            isinstance(t, dict) and all(isinstance(k, str) and number(v) for k, v in t.items())
            for t in tables)):
        raise _Failure("reward", _CHILD_ERRORS["unexpected"])
    return {k: reply[k] for k in ("reward", "components", "weights", "metrics")}


def _empty_trace(task: Any) -> Any:
    """A verifiers ``Trace`` of ``task`` with no turns yet."""
    import verifiers.v1 as vf

    return vf.Trace(
        task=vf.TraceTask(type=type(task).__name__, data=task.data,
                          key=task.key, hash=task.hash),
        agent=vf.AgentInfo(config=vf.AgentConfig(runtime=vf.SubprocessConfig())),
    )


async def _warm_scoring(task: Any) -> None:
    """Do here, once, what every score does first and a process then keeps: a trace's
    build provenance (verifiers runs ``git rev-parse`` for it, cached per process) and a
    judge call's imports (the OpenAI client's lazily loaded resources). The children
    forked for each score inherit both instead of paying them per score (a subprocess;
    a quarter second of imports per judged score). No reward code runs; nothing is sent."""
    from openai import AsyncOpenAI

    _empty_trace(task)
    async with AsyncOpenAI(api_key="unused", base_url="http://127.0.0.1/v1") as client:
        _ = client.chat.completions, client.beta.chat.completions  # loaded on access


class _Episode:
    def __init__(self, task: Any, toolsets: list[Any]) -> None:
        self.task = task
        self.toolsets = toolsets  # task toolsets: this episode's own instances
        self.servers: dict[str, Any] = {}


class Worker:
    def __init__(self, taskset_id: str, kwargs: dict[str, Any], score_timeout_s: float,
                 child: SimpleNamespace) -> None:
        import verifiers.v1 as vf

        self.score_timeout_s = score_timeout_s
        self.child = child  # envhub's disposable_child, loaded by path

        config = vf.resolve_env_config({"taskset": {"id": taskset_id, **kwargs}})
        self.taskset = vf.load_taskset(config.taskset)
        # the task's durable source id when it has one, else its content key (verifiers'
        # ``Task.key``, a hash of its data): stable across runs and orderings
        self.tasks = {task.data.id or task.key[:16]: task for task in self.taskset}
        if not self.tasks:
            raise _Failure("load", f"taskset {taskset_id!r} has no tasks")
        self.task_type = type(self.taskset).task_type()
        self.task_config = config.taskset.task
        self.shared = type(self.taskset).toolsets(config.taskset)
        self.episodes: dict[str, _Episode] = {}
        self.tools: list[dict[str, Any]] = []
        self._shared_servers: dict[str, Any] = {}
        self._started = False

    # -- tools ---------------------------------------------------------------------------

    @staticmethod
    async def _server(toolset: Any) -> Any:
        from mcp.server.mcpserver import MCPServer

        server = MCPServer(toolset.server_name or type(toolset).__name__)
        toolset.register(server)
        return server

    async def _mount(self, toolsets: list[Any], into: dict[str, Any]) -> list[dict[str, Any]]:
        """Register each toolset on an in-process MCP server; the qualified tool names
        (verifiers' chat harness: ``f"{server}_{tool}"``) map to (server, raw name)."""
        listed = []
        for toolset in toolsets:
            server = await self._server(toolset)
            for tool in await server.list_tools():
                full = f"{toolset.server_name}_{tool.name}" if toolset.server_name else tool.name
                if full in into:
                    raise _Failure("load", f"duplicate tool name {full!r}")
                into[full] = (server, tool.name)
                listed.append(
                    {"name": full, "description": tool.description or "",
                     "parameters": dict(tool.input_schema)}
                )
        return listed

    async def load(self) -> dict[str, Any]:
        if not self._started:
            for toolset in self.shared:
                await toolset.setup()
            self._started = True
            self.tools = await self._mount(self.shared, self._shared_servers)
            sample = next(iter(self.tasks.values()))
            self.tools += await self._mount(self.task_type.toolsets(sample.config), {})
            await _warm_scoring(sample)
            gc.freeze()  # what is loaded now stays shared with the scoring children
        return {
            "tasks": [self._describe(key, task) for key, task in self.tasks.items()],
            "tools": self.tools,
        }

    @staticmethod
    def _describe(key: str, task: Any) -> dict[str, Any]:
        from verifiers.v1.dialects.chat import message_to_wire

        data = task.data
        messages: list[dict[str, Any]] = []
        if data.system_prompt:
            messages.append({"role": "system", "content": data.system_prompt})
        if isinstance(data.prompt, str):
            messages.append({"role": "user", "content": data.prompt})
        elif data.prompt:
            messages.extend(message_to_wire(m) for m in data.prompt)
        # a task data class with ``answer`` / ``gold_actions`` fields (a convention of
        # the bridge; verifiers has no gold solution) gives envhub's reference policy
        # what to replay, so `envhub check` can hold its rewards to 1 and 0
        return {"id": key, "prompt": messages,
                "answer": getattr(data, "answer", None),
                "gold_actions": list(getattr(data, "gold_actions", None) or []),
                "metadata": {"idx": data.idx, "name": data.name, "source_id": data.id}}

    async def open(self, episode: str, task_id: str) -> dict[str, Any]:
        task = self.tasks.get(task_id)
        if task is None:
            raise _Failure("request", f"no task {task_id!r}")
        if episode in self.episodes:
            raise _Failure("request", f"episode {episode!r} is already open")
        own = type(task).toolsets(task.config)
        state = _Episode(task, own)
        for toolset in own:
            await toolset.setup()
            await toolset.setup_task(task.data)  # as verifiers hands it: the data
        state.servers = dict(self._shared_servers)
        await self._mount(own, state.servers)
        self.episodes[episode] = state
        return {}

    async def call(self, episode: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        from verifiers.v1.harnesses.utils.mcp import mcp_content_to_chat_content

        state = self._episode(episode)
        if tool not in state.servers:
            raise _Failure("tool", f"unknown tool {tool!r}")
        server, raw = state.servers[tool]
        try:
            result = await server.call_tool(raw, arguments)
        except Exception as exc:  # the tool raised on the model's input: its outcome
            raise _Failure("tool", f"{type(exc).__name__}: {exc}") from None
        content = mcp_content_to_chat_content(result.content)
        text = content if isinstance(content, str) else json.dumps(content)
        if result.is_error:
            raise _Failure("tool", text)
        return {"content": text}

    async def score(self, episode: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """Score in a child forked for this request (see the module docstring): this
        process never runs reward code on model text, so nothing an answer does there
        reaches another episode's reward."""
        state = self._episode(episode)
        work = functools.partial(_score_child, state.task, self.tools, messages)
        pid, result = self.child.fork_confined(work, self.score_timeout_s)
        reply = await asyncio.to_thread(
            self.child.read_reply, result, pid, self.score_timeout_s, _MAX_REPLY_BYTES)
        if "error" in reply:
            error = reply["error"]
            kind = error.get("kind") if isinstance(error, dict) else None
            if kind not in ("reward", "judge"):  # the child's words on its own failure, else ours
                raise _Failure("reward", _CHILD_ERRORS.get(str(error), "unexpected reply"))
            raise _Failure(kind, str(error.get("message"))[:_MAX_MESSAGE])
        return _checked(reply)

    async def close(self, episode: str) -> dict[str, Any]:
        self.episodes.pop(episode, None)
        return {}

    def _episode(self, episode: str) -> _Episode:
        state = self.episodes.get(episode)
        if state is None:
            raise _Failure("request", f"no open episode {episode!r}")
        return state


async def _serve(worker_args: dict[str, Any]) -> None:
    child = SimpleNamespace(**runpy.run_path(worker_args["disposable_child"]))
    child.forbid_fd_reopen()  # no scoring child may reopen our pipes by /proc/<pid>/fd
    out = os.fdopen(_PROTO_FD, "w", buffering=1, encoding="utf-8")
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    def reply(request_id: object, body: dict[str, Any]) -> None:
        out.write(json.dumps({"id": request_id, **body}) + "\n")

    try:
        worker = Worker(worker_args["taskset"], worker_args.get("kwargs") or {},
                        float(worker_args["score_timeout_s"]), child)
        reply(None, {"result": {"ready": True}})
    except Exception as exc:  # the bridge reports it (one line): no traceback here
        reply(None, {"error": {"kind": "load", "message": f"{type(exc).__name__}: {exc}"}})
        return

    async def handle(request: dict[str, Any]) -> None:
        request_id = request.get("id")
        try:
            method = getattr(worker, request["method"]) if request.get("method") in {
                "load", "open", "call", "score", "close"} else None
            if method is None:
                raise _Failure("request", f"unknown method {request.get('method')!r}")
            reply(request_id, {"result": await method(**request.get("params", {}))})
        except _Failure as exc:
            reply(request_id, {"error": {"kind": exc.kind, "message": str(exc)}})
        except Exception as exc:
            _log(traceback.format_exc())
            reply(request_id, {"error": {"kind": "internal",
                                         "message": f"{type(exc).__name__}: {exc}"}})

    pending: set[asyncio.Task[None]] = set()
    while line := await reader.readline():
        job = asyncio.create_task(handle(json.loads(line)))
        pending.add(job)
        job.add_done_callback(pending.discard)


if __name__ == "__main__":
    sys.path[:0] = [p for p in json.loads(sys.argv[1]).get("path", []) if p]
    asyncio.run(_serve(json.loads(sys.argv[1])))
