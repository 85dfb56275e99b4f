"""Judge tools over an episode's sandbox: the judge model lists and reads the final
working tree (a SWE repository, a generated project) instead of trusting the transcript.

Both tools run inside the sandbox (``find`` and ``head`` there, through the sandbox's
``exec``), so what the judge can see is what the episode could: never a
file of the host. Paths are kept under ``root`` (the working tree): an absolute path or
one that climbs out with ``..`` is an error the judge reads, not a read elsewhere in the
sandbox. Output is capped (``max_bytes``), so a huge file the policy wrote cannot fill
the judge's context; :class:`~envhub.rewards.judge.base.Judge` fences it as data.

``envhub.rewards`` sits below the sandboxes, so the sandbox is typed by the one method
used (:class:`ReadableSandbox`); every :class:`envhub.sandboxes.Sandbox` has it.
"""

from __future__ import annotations

import posixpath
from typing import Any, Protocol

from envhub.rewards.judge.base import JudgeTool

__all__ = ["ReadableSandbox", "sandbox_judge_tools"]

_LISTED_FILES = 400


class _Outcome(Protocol):
    exit_code: int
    stdout: str
    stderr: str


class ReadableSandbox(Protocol):
    """What the tools use of a sandbox: :meth:`envhub.sandboxes.Sandbox.exec`."""

    async def exec(self, cmd: list[str], timeout: float = ...) -> _Outcome: ...


def _under(root: str, path: Any) -> str:
    """``path`` (relative to ``root``) as an absolute path under ``root``; ``ValueError``
    for anything else."""
    if not isinstance(path, str) or not path or "\0" in path:
        raise ValueError("path must be a non-empty string")
    if posixpath.isabs(path):
        raise ValueError(f"path must be relative to the working tree {root}")
    resolved = posixpath.normpath(posixpath.join(root, path))
    if resolved != root and not resolved.startswith(root.rstrip("/") + "/"):
        raise ValueError(f"path {path[:200]!r} leaves the working tree {root}")
    return resolved


def sandbox_judge_tools(
    sandbox: ReadableSandbox, *, root: str, max_bytes: int = 32_000
) -> list[JudgeTool]:
    """``list_files`` and ``read_file`` over ``sandbox``'s tree under ``root`` (absolute),
    for :meth:`~envhub.rewards.judge.ReferenceJudge.judge` and the rubric judge's
    ``tools=``. Bind them to the episode's sandbox while it is still open (in the
    environment's ``reward()``, before ``close``)."""
    root = posixpath.normpath(root)
    if not posixpath.isabs(root):
        raise ValueError(f"root must be an absolute path in the sandbox, not {root!r}")

    async def list_files(arguments: dict[str, Any]) -> str:
        folder = _under(root, arguments.get("path") or ".")
        result = await sandbox.exec(
            ["find", folder, "-maxdepth", "3", "-not", "-path", "*/.git/*", "-type", "f"],
            timeout=30.0,
        )
        if result.exit_code != 0:
            raise ValueError(f"cannot list {arguments.get('path')!r}: {result.stderr[:300]}")
        names = sorted(posixpath.relpath(line, root) for line in result.stdout.splitlines())
        shown = names[:_LISTED_FILES]
        more = f"\n... and {len(names) - len(shown)} more" if len(names) > len(shown) else ""
        return "\n".join(shown) + more

    async def read_file(arguments: dict[str, Any]) -> str:
        path = _under(root, arguments.get("path"))
        result = await sandbox.exec(["head", "-c", str(max_bytes + 1), "--", path], timeout=30.0)
        if result.exit_code != 0:
            raise ValueError(f"cannot read {arguments.get('path')!r}: {result.stderr[:300]}")
        text: str = result.stdout
        if len(text.encode()) > max_bytes:
            return text.encode()[:max_bytes].decode(errors="replace") + (
                f"\n[cut at {max_bytes} bytes]"
            )
        return text

    path_schema = {"type": "string", "description": f"a path relative to {root}"}
    return [
        JudgeTool("list_files", f"List the files under a folder of the final working tree "
                  f"({root}), three levels deep.",
                  {"type": "object", "properties": {"path": path_schema}}, list_files),
        JudgeTool("read_file", f"Read a file of the final working tree ({root}).",
                  {"type": "object", "properties": {"path": path_schema},
                   "required": ["path"]}, read_file),
    ]  # fmt: skip
