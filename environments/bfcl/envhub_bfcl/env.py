"""The ``bfcl`` environment: BFCL v4 entries as episodes, scored by BFCL's checkers.

Multi-turn categories run the model's calls against live BFCL backends (file system,
trading bot, travel booking, ...) built from the entry's ``initial_config``; the scripted
user asks BFCL's next question after each final answer (``next_user_turn``), and in
``miss_func`` the held-out function joins the tools at the turn BFCL names. Single-turn
categories record the calls (nothing is executed) until the model's first message
without calls. The reward is BFCL's verdict (:mod:`envhub_bfcl.checker`) on the messages
as the model sent them (:meth:`BfclEnv.on_assistant_message`): calls the session refuses
(an unknown name, arguments that are not JSON) count as BFCL counts them.

BFCL's code never runs on the event loop: an episode's backends live in a worker
process of its own, and each verdict runs in another (:mod:`envhub_bfcl.workers`), so a
call or a verdict that runs long is killed without stopping the server's other sessions.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from pydantic import Field

from envhub import Budgets, Environment, Reward, Task, TaskSet, ToolSpec, UserTurn
from envhub.errors import ToolError
from envhub.types import Message, ToolCall
from envhub_bfcl.backends import LiveBackends, Verdicts, call_request
from envhub_bfcl.categories import (
    LEFT_OUT,
    entries,
    ground_truth,
    kind_of,
    parse_categories,
)
from envhub_bfcl.checker import Verdict, argument_problem
from envhub_bfcl.export import bfcl_step
from envhub_bfcl.gold import multi_turn_gold, valid_ast_gold
from envhub_bfcl.tools import entry_tools
from envhub_bfcl.workers import Worker

__all__ = ["RECORDED", "BfclEnv"]

#: the observation of a single-turn call (BFCL scores single-turn calls without running them)
RECORDED = "recorded (single-turn category: the call is scored, not executed)"


#: how long BFCL's checker may take on one episode (p99 about 20 ms); past it, the
#: model's calls made the verdict run away, and the episode scores 0
VERDICT_TIMEOUT_S = 60.0


def _kill_started(start: asyncio.Future[Worker]) -> None:
    """Kill the worker a start made, if it made one."""
    if not start.cancelled() and start.exception() is None:
        start.result().kill()


class BfclEnv(Environment):
    """BFCL v4: multi-turn (base, miss_func, miss_param, long_context) and single-turn
    (simple, multiple, parallel, parallel_multiple, irrelevance and their live variants)."""

    name = "bfcl"
    version = "0.1.0"
    # BFCL lets a model take up to 21 steps per user turn; entries have up to 8 turns
    budgets = Budgets(max_turns=120, tool_timeout_s=10.0, episode_timeout_s=600.0)
    client_options: ClassVar[dict[str, Any]] = {
        "categories": Annotated[str, Field(min_length=1, max_length=400)]
    }

    def __init__(self, categories: str = "all") -> None:
        super().__init__()
        self.categories = parse_categories(categories)
        self._entry: dict[str, Any] = {}
        self._tools: dict[str, ToolSpec] = {}
        self._turn = 0
        #: the episode's live backends (multi-turn), and the calls they ran: a worker
        #: killed mid-call is replaced by one that replays them
        self._backends: Worker | None = None
        self._restart: asyncio.Future[Worker] | None = None
        self._history: list[str] = []
        #: what BFCL scores: single-turn, a list of {name: arguments_json}; multi-turn, one
        #: list of steps (each a list of such calls) per user turn
        self.calls: list[dict[str, str]] = []
        self.turns: list[list[list[dict[str, str]]]] = []

    def load_tasks(self) -> TaskSet:
        tasks = []
        for category in self.categories:
            truth = ground_truth(category)
            kind = kind_of(category)
            for entry_id, entry in entries(category).items():
                if entry_id in LEFT_OUT:
                    continue
                if kind == "multi_turn":
                    gold = multi_turn_gold(entry["involved_classes"], truth[entry_id])
                else:
                    gold = valid_ast_gold(category, entry_id) if kind == "ast" else []
                tasks.append(
                    Task(
                        id=entry_id,
                        prompt=entry["question"][0],
                        answer="",
                        gold_actions=gold,
                        split="test",
                        metadata={
                            "category": category,
                            # BFCL's irrelevance rule: answering without a call is right
                            "expected_noop_reward": 1.0 if kind == "irrelevance" else 0.0,
                        },
                    )
                )
        return TaskSet(tasks)

    def task_counts(self) -> Mapping[str, int]:
        # the prompt entries alone (not the answers and gold calls load_tasks derives)
        ids = (entry_id for category in self.categories for entry_id in entries(category))
        return {"test": sum(entry_id not in LEFT_OUT for entry_id in ids)}

    @property
    def category(self) -> str:
        return str(self.task.metadata["category"])

    async def reset(self, task: Task) -> list[Message]:
        messages = await super().reset(task)
        self._entry = entries(self.category)[task.id]
        self._tools = dict(entry_tools(self.category, task.id))
        self.calls, self.turns, self._turn = [], [[]], 0
        self._history = []
        await self.close()
        if kind_of(self.category) == "multi_turn":
            # started here, outside any tool timeout: a slow start (a cold zygote, a
            # loaded machine) is never charged to the model's first call
            self._backends = await Worker.start(LiveBackends, self._entry, ())
        return messages

    def episode_tools(self) -> Mapping[str, ToolSpec]:
        """This entry's functions (none before a reset: every entry has its own)."""
        return self._tools

    async def on_assistant_message(self, tool_calls: list[ToolCall], content: str | None) -> None:
        """Record a message's calls as BFCL records an FC model's output (a step of
        ``{name: arguments}``); a message without calls adds nothing to what is scored."""
        if not tool_calls:
            return
        step = bfcl_step(tool_calls)
        if kind_of(self.category) == "multi_turn":
            self.turns[-1].append(step)
            # a worker killed by the last message's timeout is replaced here, before any
            # tool timeout runs: replaying a long history is never charged to a call
            await self._live_backends()
        else:
            self.calls.extend(step)

    async def call_function(self, tool: str, arguments: dict[str, Any]) -> str:
        """Run one call on the episode's live backends (multi-turn; a backend that raises,
        or arguments its method does not take, is an error observation); single-turn
        calls are only recorded. Arguments that would make a call run for minutes are
        refused (:func:`~envhub_bfcl.checker.argument_problem`); a call that still runs
        past the tool timeout is cancelled by the session, which kills its worker, and
        the next call gets a worker with the calls before it replayed
        (:meth:`_live_backends`; the next message waits for it before its calls run)."""
        if kind_of(self.category) != "multi_turn":
            return RECORDED
        problem = argument_problem(tool, arguments)
        if problem is not None:
            raise ValueError(problem)
        request = call_request(tool, arguments)
        backends = await self._live_backends()
        try:
            return await backends.ask(request)
        finally:
            if backends.alive:  # it ran (a backend's own error included): replay it
                self._history.append(request)

    async def _live_backends(self) -> Worker:
        """The episode's backends. A worker killed mid-call (a timeout) or dead is replaced
        by one that replays the calls before it; the replacement starts once and is
        shielded, so a call that stops waiting for it (its own timeout) leaves it starting
        for the next one instead of starting over."""
        if self._backends is not None and self._backends.alive:
            return self._backends
        if self._restart is None:
            self._restart = asyncio.ensure_future(
                Worker.start(LiveBackends, self._entry, tuple(self._history))
            )
        restart = self._restart
        try:
            self._backends = await asyncio.shield(restart)
        finally:
            if restart.done():
                self._restart = None
        return self._backends

    async def next_user_turn(self) -> UserTurn | None:
        """BFCL's next question (multi-turn); where BFCL holds a function back, the turn
        that adds it says so with BFCL's own message, and the tool set grows."""
        if kind_of(self.category) != "multi_turn":
            return None
        questions = self._entry["question"]
        self._turn += 1
        if self._turn >= len(questions):
            return None
        self.turns.append([])
        held_out = entry_tools(self.category, self.task.id, self._turn)
        if not held_out:
            return UserTurn(messages=list(questions[self._turn]))
        from bfcl_eval.constants.default_prompts import (
            DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC,
        )

        self._tools = {**self._tools, **held_out}
        prompt = DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC
        return UserTurn(messages=[prompt], tools=self._tools)

    async def reward(self) -> Reward:
        """BFCL's verdict, computed in a worker process of its own (:meth:`_verdict`)."""
        verdict = await self._verdict()
        return Reward(
            value=float(verdict.valid),
            components={"valid": float(verdict.valid)},
            info={
                "category": self.category,
                "error_type": verdict.error_type,
                "error_message": verdict.error_message[:2000],
            },
        )

    async def _verdict(self) -> Verdict:
        """BFCL's checker on what was recorded, killed past :data:`VERDICT_TIMEOUT_S`.
        The checker runs the model's calls: one that makes it run away or fail is the
        model's outcome, a verdict of 0 saying so; a worker that cannot start is
        infrastructure (``SandboxError``, the episode is masked)."""
        multi = kind_of(self.category) == "multi_turn"
        truth = ground_truth(self.category).get(self.task.id)
        worker = await Worker.start(Verdicts, self.category, self._entry, truth)
        try:
            reply = await asyncio.wait_for(
                worker.ask(json.dumps(self.turns if multi else self.calls)), VERDICT_TIMEOUT_S
            )
        except asyncio.TimeoutError:
            return Verdict(
                False,
                "envhub:checker_timeout",
                f"BFCL's checker did not finish within {VERDICT_TIMEOUT_S:g}s on these calls",
            )
        except ToolError as exc:
            return Verdict(False, "envhub:checker_error", f"BFCL's checker failed: {exc}")
        finally:
            worker.kill()
        return Verdict(**json.loads(reply))

    async def snapshot(self) -> dict[str, Any]:
        """What BFCL scores (the recorded calls), the user turn reached and the tools in
        force, copied. A multi-turn episode's backends live in a worker process: a child
        gets a worker of its own that replays the calls the backends ran (the restart a
        killed worker gets, :meth:`_live_backends`), which runs BFCL's classes only, with
        no session, observation check or tool timeout per call."""
        return self.copied_state("_tools", "_turn", "_history", "calls", "turns",
                                 shared=("_entry",))

    async def restore(self, state: object) -> None:
        self.restore_copied(state)
        if kind_of(self.category) == "multi_turn":
            self._backends = await Worker.start(LiveBackends, self._entry, tuple(self._history))

    async def close(self) -> None:
        """Stop the episode's backends (their worker exits with its socket anyway), and
        a replacement still starting."""
        if self._restart is not None:
            self._restart.add_done_callback(_kill_started)  # if it is past cancelling
            self._restart.cancel()
            self._restart = None
        if self._backends is not None:
            self._backends.kill()
