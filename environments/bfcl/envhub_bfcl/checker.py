"""BFCL's own verdicts on a recorded answer: the AST checker, the irrelevance rule and
the multi-turn state/response checker, exactly as BFCL's evaluation runner applies them
to a function-calling (FC) model's result.

An answer is in BFCL's FC result form: a single-turn answer is a list of
``{tool_name: arguments_json}``; a multi-turn answer has one list per user turn of such
steps. Function names with dots are shown to the model with underscores, as BFCL does
for FC models (``underscore_to_dot``).

Importing BFCL's AST checker reaches its model registry, which imports every vendor SDK
BFCL supports. Where that registry cannot be imported (``bfcl-eval`` installed with
``--no-deps``), :func:`_bfcl_registry` installs a one-line stand-in that answers the only
question the checker asks of it: whether the model's function names use underscores for
dots (yes, for every FC model).
"""

from __future__ import annotations

import copy
import functools
import importlib
import json
import re
import sys
import threading
import types
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from envhub_bfcl.categories import entries, ground_truth, kind_of

__all__ = [
    "MODEL_NAME",
    "Verdict",
    "argument_problem",
    "execution_string",
    "fresh_backend_defaults",
    "judge",
    "verdict",
]

#: the BFCL model name verdicts are computed for (an FC model with underscore_to_dot)
MODEL_NAME = "gpt-4o-2024-11-20-FC"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: held while a verdict runs BFCL backend code in this process: some of it sets
#: process-wide state (MathAPI sets mpmath's global precision), so two verdicts of
#: in-process callers (benchmarks, gold derivation) must not interleave; episodes judge
#: in worker processes (:mod:`envhub_bfcl.backends`)
_BACKEND_LOCK = threading.Lock()
#: arguments past which a call would run for minutes or exhaust memory, far beyond any
#: BFCL answer: mpmath/decimal precision and round's decimal places in digits, an integer
#: power's exponent and the bits of its result, the length of a value BFCL repeats
MAX_PRECISION = 10_000
MAX_EXPONENT = 10_000
MAX_POWER_BITS = 1 << 16
MAX_REPEATED_LENGTH = 1_000

#: the backends of the multi-turn categories
_BACKENDS = (
    "GorillaFileSystem", "MathAPI", "MessageAPI", "TwitterAPI", "TicketAPI", "TradingBot",
    "TravelAPI", "VehicleControlAPI",
)  # fmt: skip


@functools.cache
def _mutable_defaults() -> list[tuple[Any, tuple[Any, ...]]]:
    """The backend methods whose default arguments are mutable, with pristine copies."""
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    found = []
    for class_name in _BACKENDS:
        cls = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)
        for fn in vars(cls).values():
            defaults = getattr(fn, "__defaults__", None) or ()
            if any(isinstance(d, list | dict | set) for d in defaults):
                found.append((fn, copy.deepcopy(defaults)))
    return found


def fresh_backend_defaults() -> None:
    """Give every backend method fresh copies of its mutable defaults. BFCL's backends
    store them (``post_tweet(..., mentions=[])`` keeps the list in the tweet, and
    ``mention`` extends it), so without this one call would change what later calls
    start from (and, in a process that judges many episodes, later episodes). Where
    several threads run backend code, call it with :data:`_BACKEND_LOCK` held."""
    for fn, defaults in _mutable_defaults():
        fn.__defaults__ = copy.deepcopy(defaults)


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _digits(key: str) -> Callable[[dict[str, Any]], str | None]:
    """A precision or a number of decimal places: mpmath, decimal and ``round`` work in
    time that grows with it (``round(5, -12_000_000)``: 13 s)."""

    def problem(arguments: dict[str, Any]) -> str | None:
        value = arguments.get(key)
        if _is_number(value) and abs(value) > MAX_PRECISION:
            return f"{key} {value} is out of range (at most {MAX_PRECISION})"
        return None

    return problem


def _power(arguments: dict[str, Any]) -> str | None:
    """``base ** exponent``: integers make an integer as long as the exponent times the
    base's bits, computed before anything can print it."""
    base, exponent = arguments.get("base"), arguments.get("exponent")
    if _is_number(exponent) and abs(exponent) > MAX_EXPONENT:
        return f"exponent {exponent} is out of range (at most {MAX_EXPONENT})"
    if not (_is_number(base) and isinstance(base, int) and isinstance(exponent, int)):
        return None  # a float result: it overflows at once instead of growing
    if exponent > 0 and abs(base).bit_length() * exponent > MAX_POWER_BITS:
        return f"base ** exponent is out of range (at most {MAX_POWER_BITS} bits)"
    return None


def _not_repeated(key: str) -> Callable[[dict[str, Any]], str | None]:
    """A value BFCL multiplies by a number: a string or a list is repeated that often
    (``compute_exchange_rate`` multiplies ``value`` by rates up to 110)."""

    def problem(arguments: dict[str, Any]) -> str | None:
        value = arguments.get(key)
        if isinstance(value, str | list) and len(value) > MAX_REPEATED_LENGTH:
            return f"{key} of length {len(value)} is out of range (at most {MAX_REPEATED_LENGTH})"
        return None

    return problem


#: every backend method with an argument whose cost is not linear in its size (audited
#: over the public methods of the eight multi-turn backends of bfcl-eval 2026.3.23)
_PROBLEMS: dict[str, Callable[[dict[str, Any]], str | None]] = {
    "logarithm": _digits("precision"),
    "square_root": _digits("precision"),
    "round_number": _digits("decimal_places"),
    "power": _power,
    "compute_exchange_rate": _not_repeated("value"),
}


def argument_problem(name: str, arguments: dict[str, Any]) -> str | None:
    """Why a call must not reach BFCL's backends (a hostile argument that would hang or
    exhaust the process: BFCL's own evaluation would never finish), or ``None``. Every
    other argument costs time linear in its size, which the request size bounds."""
    problem = _PROBLEMS.get(name)
    return None if problem is None else problem(arguments)


@dataclass(frozen=True)
class Verdict:
    """BFCL's verdict on one entry: valid or not, with its error type and message."""

    valid: bool
    error_type: str = ""
    error_message: str = ""


class _FcModels(Mapping[str, Any]):
    """Stand-in for BFCL's ``MODEL_CONFIG_MAPPING``: every model is an FC model whose
    function names have dots replaced by underscores."""

    _config = types.SimpleNamespace(underscore_to_dot=True, is_fc_model=True)

    def __getitem__(self, name: str) -> Any:
        return self._config

    def __iter__(self) -> Any:
        return iter(())

    def __len__(self) -> int:
        return 0


_import_lock = threading.Lock()


@functools.cache
def _ast_checker() -> Any:
    """BFCL's ``ast_checker``, imported once (episodes score in many threads)."""
    with _import_lock:
        name = "bfcl_eval.constants.model_config"
        try:
            importlib.import_module(name)
        except ImportError:
            sys.modules.pop(name, None)
            module = types.ModuleType(name, "envhub-rl-bfcl's stand-in for BFCL's model registry")
            module.MODEL_CONFIG_MAPPING = _FcModels()  # type: ignore[attr-defined]
            sys.modules[name] = module
        from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

        return ast_checker


def _ast_verdict(category: str, entry: dict[str, Any], truth: Any, result: Any) -> Verdict:
    """What BFCL's ``_evaluate_single_ast_entry`` / ``_evaluate_single_relevance_entry``
    decide for an FC model's result."""
    ast_checker = _ast_checker()
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.utils import is_empty_output, is_function_calling_format_output

    try:  # the FC handler's decode_ast
        decoded = [{name: json.loads(args)} for call in result for name, args in call.items()]
    except Exception as exc:  # BFCL catches everything its decoder raises
        decoded, decode_error = None, str(exc)
    if kind_of(category) == "irrelevance":
        if decoded is not None and not is_empty_output(decoded):
            return Verdict(
                False,
                "irrelevance_error:decoder_success",
                "Valid syntax. Successfully decode AST when it should not.",
            )
        return Verdict(True)
    if decoded is None:
        return Verdict(
            False,
            "ast_decoder:decoder_failed",
            f"Invalid syntax. Failed to decode AST. {decode_error}",
        )
    if not is_function_calling_format_output(decoded):
        return Verdict(
            False,
            "ast_decoder:decoder_wrong_output_format",
            "Did not output in the specified format.",
        )
    checked = ast_checker(
        entry["function"],
        decoded,
        truth,
        Language.PYTHON,
        category,
        MODEL_NAME,
    )
    if checked["valid"]:
        return Verdict(True)
    return Verdict(False, checked["error_type"], "; ".join(map(str, checked["error"])))


def execution_string(name: str, arguments: dict[str, Any], known: set[str]) -> str:
    """The call string BFCL's FC decoder builds (``name(k=repr(v), ...)``), which its
    checker evaluates. A call BFCL could not execute (an unknown name, a keyword that is
    not an identifier) becomes a call that fails with a NameError, as it would in BFCL,
    without handing model text to ``eval``; so does one :func:`argument_problem` refuses
    (where BFCL's evaluation would not finish at all)."""
    unsafe = not all(_IDENTIFIER.fullmatch(k) for k in arguments)
    if name not in known or unsafe or argument_problem(name, arguments):
        return "envhub_bfcl_unknown_call()"
    return f"{name}({','.join(f'{k}={v!r}' for k, v in arguments.items())})"


def _multi_turn_verdict(
    category: str, entry: dict[str, Any], truth: Any, turns: list[list[dict[str, Any]]]
) -> Verdict:
    """What BFCL's ``_evaluate_single_multi_turn_entry`` decides for an FC model."""
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    if len(turns) != len(truth):
        return Verdict(
            False,
            "multi_turn:force_terminated",
            f"Model was force-terminated during inference phase. The length of the model "
            f"result turns ({len(turns)}) does not match the length of the ground truth "
            f"turns ({len(truth)}).",
        )
    held_out = entry.get("missed_function", {}).values()
    known = {doc["name"] for doc in entry["function"]}
    known.update(doc["name"] for docs in held_out for doc in docs)
    decoded: list[list[list[str]]] = []
    for steps in turns:
        turn: list[list[str]] = []
        for step in steps:
            try:
                calls = [
                    execution_string(name, json.loads(args), known)
                    for call in step
                    for name, args in call.items()
                ]
            except Exception:  # BFCL skips a step it cannot decode
                continue
            if calls:
                turn.append(calls)
        decoded.append(turn)
    # BFCL keeps backend instances in the module's globals under the model's name: a
    # fresh name per verdict keeps samples of one entry apart; dropped afterwards
    model = f"envhub_{uuid.uuid4().hex}"
    try:
        with _BACKEND_LOCK:
            fresh_backend_defaults()
            checked = multi_turn_checker(decoded, truth, dict(entry), category, model)
    finally:
        namespace = vars(multi_turn_utils)
        for key in [k for k in namespace if k.startswith(model)]:
            del namespace[key]
    if checked["valid"]:
        return Verdict(True)
    return Verdict(False, checked.get("error_type", ""), str(checked.get("error_message", "")))


def judge(category: str, entry_id: str, result: Any) -> Verdict:
    """BFCL's verdict on ``result`` (FC result form) for one entry of ``category``."""
    truth = ground_truth(category).get(entry_id)
    return verdict(category, entries(category)[entry_id], truth, result)


def verdict(category: str, entry: dict[str, Any], truth: Any, result: Any) -> Verdict:
    """:func:`judge` given the entry and its possible answer (``None`` for irrelevance)
    as data: what a worker process needs, without loading the category."""
    if kind_of(category) == "multi_turn":
        return _multi_turn_verdict(category, entry, truth, result)
    return _ast_verdict(category, entry, truth, result)
