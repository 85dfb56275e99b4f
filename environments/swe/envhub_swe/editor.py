"""``str_replace_editor``: view, create, str_replace, insert and undo_edit on sandbox files.

The behaviour of SWE-agent/OpenHands' editor (and R2E-Gym's ``file_editor``), so
prompts and policies written for those work here: ``view`` prints ``cat -n`` style,
``old_str`` must match exactly once, every edit can be undone. Mistakes raise
:class:`~envhub.errors.ToolError` with a message the model can act on.
"""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath

from envhub.errors import ToolError
from envhub.sandboxes import Sandbox

__all__ = ["Editor"]

#: files larger than this are not opened whole (view a range instead)
MAX_FILE_BYTES = 2 * 1024 * 1024
SNIPPET_LINES = 4


def _numbered(text: str, start: int = 1) -> str:
    return "\n".join(f"{i:6}\t{line}" for i, line in enumerate(text.split("\n"), start))


class Editor:
    """File editing inside one sandbox, with a per-file undo history."""

    def __init__(self, sandbox: Sandbox, workdir: str) -> None:
        self.sb = sandbox
        self.workdir = workdir
        self.history: dict[str, list[str | None]] = {}

    def _resolve(self, path: str) -> str:
        p = PurePosixPath(path)
        if not p.is_absolute():
            p = PurePosixPath(self.workdir) / p
        if ".." in p.parts:
            raise ToolError(f"path {path!r} must not contain '..'")
        return str(p)

    def _rel(self, path: str) -> str:
        """What the sandbox API takes: a workdir-relative path when it is inside it."""
        wd = PurePosixPath(self.workdir)
        p = PurePosixPath(path)
        return str(p.relative_to(wd)) if p.is_relative_to(wd) and p != wd else path

    async def _kind(self, path: str) -> str:
        r = await self.sb.exec(
            f"if [ -d {shlex.quote(path)} ]; then echo dir; elif [ -f {shlex.quote(path)} ]; "
            "then echo file; else echo missing; fi",
            timeout=30,
        )
        return r.stdout.strip()

    async def _read(self, path: str) -> str:
        size = await self.sb.exec(["stat", "-c", "%s", path], timeout=30)
        if size.ok and int(size.stdout.strip() or 0) > MAX_FILE_BYTES:
            raise ToolError(f"{path} is larger than {MAX_FILE_BYTES} bytes; use bash to inspect it")
        data = await self.sb.read_file(self._rel(path), max_bytes=MAX_FILE_BYTES)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f"{path} is not a UTF-8 text file") from None

    async def _write(self, path: str, text: str) -> None:
        await self.sb.write_file(self._rel(path), text.encode("utf-8"))

    async def run(
        self,
        command: str,
        path: str,
        *,
        file_text: str | None = None,
        old_str: str | None = None,
        new_str: str | None = None,
        insert_line: int | None = None,
        view_range: list[int] | None = None,
    ) -> str:
        full = self._resolve(path)
        if command == "view":
            return await self.view(full, view_range)
        if command == "create":
            if file_text is None:
                raise ToolError("create needs file_text")
            return await self.create(full, file_text)
        if command == "str_replace":
            if old_str is None:
                raise ToolError("str_replace needs old_str")
            return await self.str_replace(full, old_str, new_str or "")
        if command == "insert":
            if insert_line is None or new_str is None:
                raise ToolError("insert needs insert_line and new_str")
            return await self.insert(full, insert_line, new_str)
        if command == "undo_edit":
            return await self.undo(full)
        raise ToolError(
            f"unknown command {command!r}; use view, create, str_replace, insert or undo_edit"
        )

    async def view(self, path: str, view_range: list[int] | None) -> str:
        kind = await self._kind(path)
        if kind == "missing":
            raise ToolError(f"the path {path} does not exist")
        if kind == "dir":
            if view_range:
                raise ToolError("view_range is only for files")
            r = await self.sb.exec(
                f"find {shlex.quote(path)} -maxdepth 2 -not -path '*/.*' | sort", timeout=30
            )
            return f"Files and directories up to 2 levels deep in {path}:\n{r.stdout}"
        text = await self._read(path)
        if not view_range:
            return f"Here's the result of running `cat -n` on {path}:\n{_numbered(text)}\n"
        lines = text.split("\n")
        if len(view_range) != 2:
            raise ToolError("view_range must be [start, end] (end -1 means to the end)")
        start, end = view_range
        if not 1 <= start <= len(lines):
            raise ToolError(f"view_range start {start} is outside the file's lines 1-{len(lines)}")
        if end == -1:
            end = len(lines)
        if end < start or end > len(lines):
            raise ToolError(
                f"view_range end {end} must be between {start} and {len(lines)} (or -1)"
            )
        snippet = "\n".join(lines[start - 1 : end])
        return f"Here's the result of running `cat -n` on {path}:\n{_numbered(snippet, start)}\n"

    async def create(self, path: str, file_text: str) -> str:
        if await self._kind(path) != "missing":
            raise ToolError(f"{path} already exists; use str_replace to change it")
        await self._write(path, file_text)
        self.history.setdefault(path, []).append(None)
        return f"File created successfully at: {path}"

    async def str_replace(self, path: str, old_str: str, new_str: str) -> str:
        if await self._kind(path) != "file":
            raise ToolError(f"{path} is not a file")
        text = await self._read(path)
        count = text.count(old_str) if old_str else 0
        if count == 0:
            raise ToolError(
                f"No replacement was performed: old_str did not appear verbatim in {path}."
            )
        if count > 1:
            lines = sorted({text.count("\n", 0, i) + 1 for i in _find_all(text, old_str)})
            raise ToolError(
                f"No replacement was performed: old_str appears {count} times in {path} "
                f"(lines {', '.join(map(str, lines))}); include more context to make it unique."
            )
        at = text.index(old_str)
        new_text = text.replace(old_str, new_str, 1)
        await self._write(path, new_text)
        self.history.setdefault(path, []).append(text)
        line = text.count("\n", 0, at)
        return (
            f"The file {path} has been edited. Here's the result of running `cat -n` on a "
            f"snippet of {path}:\n"
            f"{self._snippet(new_text, line, new_str.count(chr(10)))}\n"
            "Review the changes and make sure they are as expected."
        )

    async def insert(self, path: str, insert_line: int, new_str: str) -> str:
        if await self._kind(path) != "file":
            raise ToolError(f"{path} is not a file")
        text = await self._read(path)
        lines = text.split("\n")
        if not 0 <= insert_line <= len(lines):
            raise ToolError(f"insert_line {insert_line} must be between 0 and {len(lines)}")
        new_lines = new_str.split("\n")
        new_text = "\n".join([*lines[:insert_line], *new_lines, *lines[insert_line:]])
        await self._write(path, new_text)
        self.history.setdefault(path, []).append(text)
        return (
            f"The file {path} has been edited. Here's the result of running `cat -n` on a "
            f"snippet of the edited file:\n"
            f"{self._snippet(new_text, insert_line, len(new_lines) - 1)}\n"
        )

    async def undo(self, path: str) -> str:
        stack = self.history.get(path)
        if not stack:
            raise ToolError(f"no edit history for {path}")
        previous = stack.pop()
        if previous is None:  # undo a create
            await self.sb.exec(f"rm -f {shlex.quote(path)}", timeout=30)
            return f"Removed {path} (undid its creation)."
        await self._write(path, previous)
        return f"Last edit to {path} undone successfully."

    @staticmethod
    def _snippet(text: str, first_line: int, extra_lines: int) -> str:
        lines = text.split("\n")
        start = max(0, first_line - SNIPPET_LINES)
        end = min(len(lines), first_line + extra_lines + SNIPPET_LINES + 1)
        return _numbered("\n".join(lines[start:end]), start + 1)


def _find_all(text: str, sub: str) -> list[int]:
    out, i = [], text.find(sub)
    while i != -1:
        out.append(i)
        i = text.find(sub, i + 1)
    return out
