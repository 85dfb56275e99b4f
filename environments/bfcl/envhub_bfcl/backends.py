"""What runs in BFCL's worker processes (:mod:`envhub_bfcl.workers`): one episode's live
backends, and one verdict.

:class:`LiveBackends` holds the backend instances of one multi-turn episode, built from
the entry's ``initial_config`` as BFCL's ``execute_multi_turn_func_call`` builds them.
BFCL's backends are deterministic given their calls (their randomness is seeded by the
scenario), so an episode's state is its entry plus the calls that ran: a worker killed
mid-call is replaced by one that replays the calls before it (``history``), which is
what BFCL's own checker does to compute state. :class:`Verdicts` answers one recorded
result with BFCL's verdict, in a process of its own: the checker replays the model's
calls on fresh backends and ``eval``-s their text, so it runs where it can be killed.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
import json
from collections.abc import Sequence
from typing import Any

from envhub_bfcl.checker import fresh_backend_defaults, verdict

__all__ = ["LiveBackends", "Verdicts", "call_request", "render"]


def render(value: Any) -> str:
    """A backend's return value as BFCL's inference shows it to the model."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


def call_request(tool: str, arguments: dict[str, Any]) -> str:
    """One call as a request line for :class:`LiveBackends` (raises on arguments JSON
    cannot hold, such as nesting past the recursion limit: the call's own error)."""
    return json.dumps([tool, arguments])


class LiveBackends:
    """One episode's backend instances, public method name -> bound method; a request is
    a :func:`call_request` line, the reply the rendered return value."""

    def __init__(self, entry: dict[str, Any], history: Sequence[str]) -> None:
        from bfcl_eval.constants.executable_backend_config import (
            CLASS_FILE_PATH_MAPPING,
            STATELESS_CLASSES,
        )

        long_context = "long_context" in entry["id"]
        self.methods: dict[str, Any] = {}
        for class_name in entry["involved_classes"]:
            module = importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name])
            instance = getattr(module, class_name)()
            if class_name not in STATELESS_CLASSES:
                config = copy.deepcopy(entry["initial_config"].get(class_name, {}))
                instance._load_scenario(config, long_context=long_context)
            for name, method in inspect.getmembers(instance, inspect.ismethod):
                if not name.startswith("_"):
                    self.methods[name] = method
        for request in history:  # the calls that ran before a kill, with their effects
            try:
                self(request)
            except Exception:  # it failed the first time too; its effects are replayed
                pass

    def __call__(self, request: str) -> str:
        tool, arguments = json.loads(request)
        fresh_backend_defaults()
        return render(self.methods[tool](**arguments))


class Verdicts:
    """BFCL's verdict on one entry; a request is the recorded result as JSON, the reply
    the :class:`~envhub_bfcl.checker.Verdict` as JSON."""

    def __init__(self, category: str, entry: dict[str, Any], truth: Any) -> None:
        self.category, self.entry, self.truth = category, entry, truth

    def __call__(self, request: str) -> str:
        judged = verdict(self.category, self.entry, self.truth, json.loads(request))
        return json.dumps(dataclasses.asdict(judged))
