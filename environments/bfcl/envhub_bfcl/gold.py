"""Gold actions from BFCL's possible answers, for the reference policy.

Multi-turn: each turn's ground-truth calls (BFCL writes them as Python call strings; a
positional argument is bound to its parameter by the backend method's signature), then a
final answer that ends the turn (a :class:`~envhub.GoldCall` with an empty name). AST
categories: one valid instantiation of the possible answer (the first accepted value of
each parameter; an optional parameter whose first accepted value is ``""`` is left out).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
from typing import Any

from envhub import GoldCall

__all__ = ["END_OF_TURN", "ast_gold", "multi_turn_gold"]

#: the gold action that answers the current user turn with a (empty) final message
END_OF_TURN = GoldCall(name="", arguments={"content": ""})


def _first(accepted: Any) -> Any:
    """The first accepted value of a possible answer, recursively for nested dicts."""
    value = accepted[0] if isinstance(accepted, list) and accepted else accepted
    return _instantiate(value)


def _instantiate(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _first(v) for k, v in value.items() if not _omitted(v)}
    if isinstance(value, list):
        return [_instantiate(v) for v in value]
    return value


def _omitted(accepted: Any) -> bool:
    return isinstance(accepted, list) and bool(accepted) and accepted[0] == ""


def _instantiation(
    possible_answer: list[dict[str, Any]], required: dict[str, set[str]], omit: str
) -> list[GoldCall]:
    calls = []
    for expected in possible_answer:
        for name, params in expected.items():
            arguments = {}
            for key, accepted in params.items():
                if key in required.get(name, ()):  # required: a value, "" when only "" fits
                    values = [a for a in accepted if a != ""] or accepted
                    arguments[key] = _first(values)
                elif accepted in ([""], []) or (omit == "first" and _omitted(accepted)):
                    continue
                elif not (omit == "any" and "" in accepted):
                    arguments[key] = _first([a for a in accepted if a != ""] or accepted)
            calls.append(GoldCall(name=name.replace(".", "_"), arguments=arguments))
    return calls


def ast_gold(
    possible_answer: list[dict[str, Any]], functions: list[dict[str, Any]]
) -> list[list[GoldCall]]:
    """Instantiations of a possible answer, the likeliest first: one call per expected
    function, in BFCL's order, named as the model sees it. An optional parameter is left
    out where the first accepted value is ``""`` (absent), then nowhere, then wherever
    absence is accepted. A required parameter always gets a value."""
    required = {f["name"]: set(f["parameters"].get("required", [])) for f in functions}
    return [_instantiation(possible_answer, required, omit) for omit in ("first", "never", "any")]


def _methods(classes: list[str]) -> dict[str, inspect.Signature]:
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    signatures: dict[str, inspect.Signature] = {}
    for class_name in classes:
        cls = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)
        for name, fn in inspect.getmembers(cls, inspect.isfunction):
            if not name.startswith("_"):
                signatures[name] = inspect.signature(fn)
    return signatures


def _parse_call(text: str, signatures: dict[str, inspect.Signature]) -> GoldCall:
    node = ast.parse(text, mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a function call: {text!r}")
    args = [ast.literal_eval(a) for a in node.args]
    kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
    bound = signatures[node.func.id].bind(None, *args, **kwargs)  # None: self
    arguments = {k: v for k, v in bound.arguments.items() if k != "self"}
    return GoldCall(name=node.func.id, arguments=arguments)


def multi_turn_gold(classes: list[str], truth: list[list[str]]) -> list[GoldCall]:
    signatures = _methods(classes)
    gold: list[GoldCall] = []
    for turn in truth:
        gold.extend(_parse_call(call, signatures) for call in turn)
        gold.append(END_OF_TURN)
    return gold


def valid_ast_gold(category: str, entry_id: str) -> list[GoldCall]:
    """The first instantiation of the entry's possible answer that BFCL's AST checker
    accepts; ``ValueError`` when none does (see :data:`envhub_bfcl.categories.LEFT_OUT`)."""
    from envhub_bfcl.categories import entries, ground_truth
    from envhub_bfcl.checker import judge

    functions = entries(category)[entry_id]["function"]
    for calls in ast_gold(ground_truth(category)[entry_id], functions):
        result = [{c.name: json.dumps(c.arguments)} for c in calls]
        if judge(category, entry_id, result).valid:
            return calls
    raise ValueError(f"no instantiation of {entry_id}'s possible answer passes BFCL's checker")
