"""``--tasks SPEC``: which tasks a rollout or check runs.

Grammar: ``SPLIT`` (a split name), ``[SPLIT][START:END]`` (a Python-style slice of a
split's fixed order, ``0:100`` or ``train[0:100]``; without a split, the default one), or
``ID,ID,...`` (task ids). The default split is ``test`` when the environment has one,
otherwise all tasks.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from envhub.errors import InvalidRequest

__all__ = ["DEFAULT_SPLIT", "select_task_ids"]

DEFAULT_SPLIT = "test"
_SLICE = re.compile(r"^(?P<split>[^\[\],:]*?)\[?(?P<start>-?\d*):(?P<end>-?\d*)\]?$")


async def _ids(env: Any, split: str | None) -> list[str]:
    ids = env.task_ids(split)
    return list(await ids) if inspect.isawaitable(ids) else list(ids)


async def _default_ids(env: Any) -> list[str]:
    try:
        return await _ids(env, DEFAULT_SPLIT)
    except InvalidRequest:  # no test split: every task
        return await _ids(env, None)


async def select_task_ids(env: Any, spec: str | None) -> list[str]:
    """Resolve a ``--tasks`` spec against an environment (local or remote)."""
    if spec is None or not spec.strip():
        return await _default_ids(env)
    spec = spec.strip()
    match = _SLICE.match(spec)
    if match:
        split = match["split"] or None
        ids = await _ids(env, split) if split else await _default_ids(env)
        start = int(match["start"]) if match["start"] else None
        end = int(match["end"]) if match["end"] else None
        selected = ids[start:end]
        if not selected:
            raise InvalidRequest(f"--tasks {spec!r} selects no task (the split has {len(ids)})")
        return selected
    if "," in spec:
        ids = [part.strip() for part in spec.split(",") if part.strip()]
        known = set(await _ids(env, None))
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise InvalidRequest(f"unknown task ids: {', '.join(unknown[:10])}")
        return ids
    try:
        return await _ids(env, spec)
    except InvalidRequest:
        if spec in set(await _ids(env, None)):
            return [spec]  # a single task id
        raise
