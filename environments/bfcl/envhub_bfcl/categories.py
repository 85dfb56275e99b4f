"""BFCL's categories as envhub knows them: names, kinds, and their entries from the
``bfcl-eval`` wheel (loaded once per process, by BFCL's own loader).

A category is named as BFCL names it (``multi_turn_base``, ``simple_python``,
``live_parallel``) or by its short name (``base``, ``simple``); task ids are BFCL's entry
ids, so a result file written from envhub lines up with BFCL's data.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

from envhub.errors import InvalidRequest, RegistryError

__all__ = [
    "CATEGORIES",
    "LEFT_OUT",
    "Kind",
    "entries",
    "ground_truth",
    "kind_of",
    "parse_categories",
]

Kind = Literal["multi_turn", "ast", "irrelevance"]

#: every category shipped, BFCL's name -> how it is scored
CATEGORIES: dict[str, Kind] = {
    "multi_turn_base": "multi_turn",
    "multi_turn_miss_func": "multi_turn",
    "multi_turn_miss_param": "multi_turn",
    "multi_turn_long_context": "multi_turn",
    "simple_python": "ast",
    "multiple": "ast",
    "parallel": "ast",
    "parallel_multiple": "ast",
    "irrelevance": "irrelevance",
    "live_simple": "ast",
    "live_multiple": "ast",
    "live_parallel": "ast",
    "live_parallel_multiple": "ast",
    "live_irrelevance": "irrelevance",
}
#: entries left out: no answer passes BFCL's own checker (entry id -> why)
LEFT_OUT: dict[str, str] = {
    "live_simple_106-63-0": "a required parameter's possible answer accepts no value ([])",
    "live_simple_112-68-0": "a required parameter's possible answer accepts no value ([])",
    "live_multiple_862-181-3": "the possible answer sets journey_start_time, a parameter the "
    "expected function does not have",
    "live_multiple_964-207-0": "the possible answer sets question; the function's one "
    "(required) parameter is statement",
}
_SHORT = {
    "base": "multi_turn_base",
    "miss_func": "multi_turn_miss_func",
    "miss_param": "multi_turn_miss_param",
    "long_context": "multi_turn_long_context",
    "simple": "simple_python",
}
_GROUPS = {
    "all": list(CATEGORIES),
    "multi_turn": [c for c, k in CATEGORIES.items() if k == "multi_turn"],
    "single_turn": [c for c, k in CATEGORIES.items() if k != "multi_turn"],
}


def parse_categories(spec: str) -> list[str]:
    """``"base,simple,live_parallel"`` (or a group: ``all``, ``multi_turn``,
    ``single_turn``) -> BFCL category names in a fixed order; an unknown name is an
    :class:`~envhub.errors.InvalidRequest` that lists the known ones."""
    wanted: list[str] = []
    for raw in (part.strip() for part in str(spec).split(",")):
        if not raw:
            continue
        names = _GROUPS.get(raw) or [_SHORT.get(raw, raw)]
        for name in names:
            if name not in CATEGORIES:
                known = ", ".join([*_GROUPS, *_SHORT, *CATEGORIES])
                raise InvalidRequest(f"unknown BFCL category {raw!r}; known: {known}")
            if name not in wanted:
                wanted.append(name)
    if not wanted:
        raise InvalidRequest("no BFCL category given")
    return [c for c in CATEGORIES if c in wanted]


def kind_of(category: str) -> Kind:
    return CATEGORIES[category]


@functools.cache
def entries(category: str) -> dict[str, dict[str, Any]]:
    """BFCL's prompt entries of a category by id, as its inference pipeline loads them
    (function docs filled in for multi-turn, held-out ones moved to ``missed_function``,
    the language hint added to the descriptions). Callers must not mutate them."""
    try:
        from bfcl_eval.utils import load_dataset_entry
    except ImportError as exc:  # declared apart: its dependency tree cannot install beside ours
        raise RegistryError(
            f"envhub-rl-bfcl needs bfcl-eval ({exc.name} is missing): pip install --no-deps "
            "bfcl-eval==2026.3.23 (its declared dependencies pin numpy 1.26, faiss and vendor "
            "SDKs; the data, backends and checkers need none of them)"
        ) from None

    return {e["id"]: e for e in load_dataset_entry(category, include_prereq=False)}


@functools.cache
def ground_truth(category: str) -> dict[str, Any]:
    """BFCL's possible answers of a category by entry id (none for irrelevance)."""
    if kind_of(category) == "irrelevance":
        return {}
    ids = list(entries(category))  # first: it says how to install a missing bfcl-eval
    from bfcl_eval.utils import load_ground_truth_entry

    answers = load_ground_truth_entry(category)
    # BFCL aligns prompts and answers by position (some answer ids are spelled differently)
    return {entry_id: answer["ground_truth"] for entry_id, answer in zip(ids, answers, strict=True)}
