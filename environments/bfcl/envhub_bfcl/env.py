"""The ``bfcl`` environment: BFCL v4 entries as episodes, scored by BFCL's checkers.

Multi-turn categories run the model's calls against live BFCL backends (file system,
trading bot, travel booking, ...) built from the entry's ``initial_config``; the scripted
user asks BFCL's next question after each final answer (``next_user_turn``), and in
``miss_func`` the held-out function joins the tools at the turn BFCL names. Single-turn
categories record the calls (nothing is executed) until the model's first message
without calls. The reward is BFCL's verdict (:mod:`envhub_bfcl.checker`) on the messages
as the model sent them (:meth:`BfclEnv.on_assistant_message`): calls the session refuses
(an unknown name, arguments that are not JSON) count as BFCL counts them.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from pydantic import Field

from envhub import Budgets, Environment, Reward, Task, TaskSet, ToolSpec, UserTurn
from envhub.types import Message, ToolCall
from envhub_bfcl.categories import (
    LEFT_OUT,
    entries,
    ground_truth,
    kind_of,
    parse_categories,
)
from envhub_bfcl.checker import (
    BACKEND_LOCK,
    argument_problem,
    fresh_backend_defaults,
    judge,
)
from envhub_bfcl.export import bfcl_step
from envhub_bfcl.gold import multi_turn_gold, valid_ast_gold
from envhub_bfcl.tools import tools_for

__all__ = ["RECORDED", "BfclEnv"]

#: the observation of a single-turn call (BFCL scores single-turn calls without running them)
RECORDED = "recorded (single-turn category: the call is scored, not executed)"


def _render(value: Any) -> str:
    """A backend's return value as BFCL's inference shows it to the model."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


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
        self._methods: dict[str, Any] = {}
        self._turn = 0
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

    @property
    def category(self) -> str:
        return str(self.task.metadata["category"])

    async def reset(self, task: Task) -> list[Message]:
        messages = await super().reset(task)
        self._entry = entries(self.category)[task.id]
        self._tools = dict(tools_for(self._entry["function"]))
        self.calls, self.turns, self._turn = [], [[]], 0
        if kind_of(self.category) == "multi_turn":
            self._methods = self._backends(self._entry)
        return messages

    @staticmethod
    def _backends(entry: dict[str, Any]) -> dict[str, Any]:
        """Fresh backend instances loaded with the entry's ``initial_config``, as BFCL's
        ``execute_multi_turn_func_call`` builds them; public method name -> bound method."""
        from bfcl_eval.constants.executable_backend_config import (
            CLASS_FILE_PATH_MAPPING,
            STATELESS_CLASSES,
        )

        long_context = "long_context" in entry["id"]
        methods: dict[str, Any] = {}
        for class_name in entry["involved_classes"]:
            cls = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)
            instance = cls()
            if class_name not in STATELESS_CLASSES:
                config = copy.deepcopy(entry["initial_config"].get(class_name, {}))
                instance._load_scenario(config, long_context=long_context)
            for name, method in inspect.getmembers(instance, inspect.ismethod):
                if not name.startswith("_"):
                    methods[name] = method
        return methods

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
        else:
            self.calls.extend(step)

    async def call_function(self, tool: str, arguments: dict[str, Any]) -> str:
        """Run one call on the live backends (multi-turn; a backend that raises, or
        arguments its method does not take, is an error observation); single-turn calls
        are only recorded. BFCL's backends are small pure-Python objects (all of an
        episode's calls take milliseconds), so a call runs on the event loop: a thread hop
        would cost more than the call; arguments that would make one run long are refused
        (:func:`~envhub_bfcl.checker.argument_problem`)."""
        if kind_of(self.category) != "multi_turn":
            return RECORDED
        problem = argument_problem(tool, arguments)
        if problem is not None:
            raise ValueError(problem)
        # backends keep what they are given (a tweet keeps its mentions list and ``mention``
        # extends it): they get copies, never objects shared with the caller's data
        arguments = copy.deepcopy(arguments)
        with BACKEND_LOCK:
            fresh_backend_defaults()
            return _render(self._methods[tool](**arguments))

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
        held_out = self._entry.get("missed_function", {}).get(str(self._turn))
        if not held_out:
            return UserTurn(messages=list(questions[self._turn]))
        from bfcl_eval.constants.default_prompts import (
            DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC,
        )

        self._tools = {**self._tools, **tools_for(held_out)}
        prompt = DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC
        return UserTurn(messages=[prompt], tools=self._tools)

    async def reward(self) -> Reward:
        """BFCL's verdict; on the event loop like the calls (p99 about 20 ms per episode for
        the multi-turn checker, which replays the calls and the ground truth)."""
        multi = kind_of(self.category) == "multi_turn"
        verdict = judge(self.category, self.task.id, self.turns if multi else self.calls)
        return Reward(
            value=float(verdict.valid),
            components={"valid": float(verdict.valid)},
            info={
                "category": self.category,
                "error_type": verdict.error_type,
                "error_message": verdict.error_message[:2000],
            },
        )
