"""Forks of a SWE episode on every backend: the parent's change, staged or not, new files
included, reaches each child natively (diffs applied in a fresh sandbox, no command run
again); a child's edits are invisible to its siblings and to the parent; an episode
whose history moved (a commit) forks by replay instead, checked call by call."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable

import pytest

import envhub
from envhub import StepResult
from envhub.errors import NotDeterministic
from envhub.protocol import SessionHandle
from envhub.sandboxes.bwrap import bwrap_problem

CallTool = Callable[..., Awaitable[StepResult]]  # the `call` fixture (conftest.py)


def _backend(request: pytest.FixtureRequest, backend: str) -> str:
    if backend == "docker":
        request.getfixturevalue("swe_images")  # skips without Docker
    elif backend == "bwrap" and (problem := bwrap_problem()):
        if os.environ.get("ENVHUB_REQUIRE_BWRAP") == "1":
            pytest.fail(f"bwrap required (ENVHUB_REQUIRE_BWRAP=1) but {problem}")
        pytest.skip(problem)
    return backend


async def _shell(call: CallTool, session: SessionHandle, command: str) -> str:
    content = (await call(session, "bash", command=command)).observations[0].content
    return content.split("<output>\n", 1)[1].removesuffix("</output>").strip("\n")


@pytest.mark.parametrize("backend", ["local", "bwrap", "docker"])
async def test_children_share_the_parent_change_and_nothing_after(
    backend: str, request: pytest.FixtureRequest, ci_task_ids: list[str], call: CallTool
) -> None:
    env = envhub.make("swe", sandbox=_backend(request, backend))
    try:
        async with env.open(ci_task_ids[0]) as parent:
            await _shell(
                call,
                parent,
                "echo staged > staged.txt && git add staged.txt && "
                "echo untracked > new.txt && echo '# edit' >> setup.py && "
                "date +%s%N > stamp.txt",
            )
            first, second = await parent.fork(2)
            stamp = await _shell(call, parent, "cat stamp.txt")
            for child in (first, second):
                status = await _shell(call, child, "git status --porcelain")
                assert sorted(status.splitlines()) == [
                    " M setup.py",
                    "?? new.txt",
                    "?? stamp.txt",
                    "A  staged.txt",
                ]
                assert await _shell(call, child, "cat new.txt") == "untracked"
                # copied, not run again: a replay would have written another time
                assert await _shell(call, child, "cat stamp.txt") == stamp
            await _shell(call, first, "echo mine > only-first.txt && rm new.txt")
            for other in (second, parent):
                gone = await _shell(call, other, "ls only-first.txt 2>&1 || true")
                assert gone.endswith("No such file or directory")
                assert await _shell(call, other, "cat new.txt") == "untracked"
            for child in (first, second):
                await child.abort()
            await _shell(call, parent, "git -c user.name=a -c user.email=a@b commit -qm x")
            # HEAD moved, which no diff carries: the fork replays, and the replay of
            # `cat stamp.txt` reads another time than the parent did
            with pytest.raises(NotDeterministic, match="swe is not deterministic"):
                await parent.fork(1)
    finally:
        await env.aclose()
