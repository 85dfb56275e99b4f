"""``--tasks SPEC``: which tasks a rollout or check runs.

Grammar: ``SPLIT`` (a split name), ``[SPLIT][START:END]`` (a Python-style slice of a
split's fixed order, ``0:100`` or ``train[0:100]``; without a split, the default one), or
``ID,ID,...`` (task ids). The default split is ``test`` when the environment has one,
otherwise all tasks. Unlike a Python slice, a bound past the end of the split is refused:
``0:800`` of a 600-task split is a mistake about the split, not a request for 600 tasks.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from envhub.errors import InvalidRequest
from envhub.protocol import EnvironmentClient

__all__ = ["DEFAULT_SPLIT", "select_task_ids"]

DEFAULT_SPLIT = "test"
_SLICE = re.compile(r"^(?P<split>[^\[\],:]*?)\[?(?P<start>-?\d*):(?P<end>-?\d*)\]?$")


async def _ids(env: EnvironmentClient, split: str | None) -> list[str]:
    return list(await env.task_ids(split))


async def _default_ids(env: EnvironmentClient) -> tuple[list[str], str]:
    """The default selection and its name (for messages)."""
    try:
        return await _ids(env, DEFAULT_SPLIT), f"the {DEFAULT_SPLIT} split"
    except InvalidRequest:  # no test split: every task
        return await _ids(env, None), "the environment"


async def select_task_ids(
    env: EnvironmentClient, spec: str | Sequence[str] | None
) -> list[str]:
    """Resolve a ``--tasks`` spec, or check a list of task ids, against an environment."""
    if spec is not None and not isinstance(spec, str):
        return await _known(env, list(spec))
    if spec is None or not spec.strip():
        return (await _default_ids(env))[0]
    spec = spec.strip()
    match = _SLICE.match(spec)
    if match:
        split = match["split"] or None
        if split:
            ids, where = await _ids(env, split), f"the {split} split"
        else:
            ids, where = await _default_ids(env)
        start = int(match["start"]) if match["start"] else None
        end = int(match["end"]) if match["end"] else None
        past = [b for b in (start, end) if b is not None and not -len(ids) <= b <= len(ids)]
        if past:
            whole = f"{split}[0:{len(ids)}]" if split else f"0:{len(ids)}"
            raise InvalidRequest(
                f"--tasks {spec!r} reaches past the end: {where} has {len(ids)} tasks, so "
                f"{past[0]} is out of range (all of them: {whole})"
            )
        selected = ids[start:end]
        if not selected:
            raise InvalidRequest(f"--tasks {spec!r} selects no task (the split has {len(ids)})")
        return selected
    if "," in spec:
        return await _known(env, [part.strip() for part in spec.split(",") if part.strip()])
    try:
        return await _ids(env, spec)
    except InvalidRequest:
        if spec in set(await _ids(env, None)):
            return [spec]  # a single task id
        raise


async def _known(env: EnvironmentClient, ids: list[str]) -> list[str]:
    """``ids``, if the environment has every one of them."""
    if not ids:
        raise InvalidRequest("the task list is empty")
    known = set(await _ids(env, None))
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise InvalidRequest(f"unknown task ids: {', '.join(unknown[:10])}")
    return ids
