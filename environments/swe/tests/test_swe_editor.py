"""str_replace_editor edge cases, on a local sandbox (the editor only uses the sandbox
file API, which every backend implements alike)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from envhub_swe.editor import Editor

from envhub.errors import ToolError
from envhub.sandboxes import SandboxSpec, open_sandbox


@pytest.fixture
async def editor() -> AsyncIterator[Editor]:
    async with open_sandbox(SandboxSpec(), "local") as sb:
        await sb.write_file("pkg/mod.py", b"a = 1\nb = 2\na = 1\nc = 3\n")
        yield Editor(sb, ".")


async def test_view_file_range_and_directory(editor: Editor) -> None:
    out = await editor.run("view", "pkg/mod.py")
    assert "     2\tb = 2" in out and out.startswith("Here's the result of running `cat -n`")
    assert "     3\ta = 1" in await editor.run("view", "pkg/mod.py", view_range=[3, -1])
    assert "b = 2" not in await editor.run("view", "pkg/mod.py", view_range=[3, 4])
    listing = await editor.run("view", "pkg")
    assert "pkg/mod.py" in listing
    with pytest.raises(ToolError, match="outside the file's lines 1-5"):
        await editor.run("view", "pkg/mod.py", view_range=[9, 10])
    with pytest.raises(ToolError, match="end 2 must be between 3 and 5"):
        await editor.run("view", "pkg/mod.py", view_range=[3, 2])
    with pytest.raises(ToolError, match="does not exist"):
        await editor.run("view", "nowhere.py")


async def test_str_replace_needs_exactly_one_match(editor: Editor) -> None:
    with pytest.raises(ToolError, match=r"appears 2 times in .*\(lines 1, 3\)"):
        await editor.run("str_replace", "pkg/mod.py", old_str="a = 1", new_str="a = 9")
    with pytest.raises(ToolError, match="did not appear verbatim"):
        await editor.run("str_replace", "pkg/mod.py", old_str="z = 0", new_str="")
    with pytest.raises(ToolError, match="did not appear verbatim"):
        await editor.run("str_replace", "pkg/mod.py", old_str="", new_str="x")
    out = await editor.run("str_replace", "pkg/mod.py", old_str="b = 2\na = 1", new_str="b = 7")
    assert "has been edited" in out and "     2\tb = 7" in out
    assert (await editor.sb.read_file("pkg/mod.py")) == b"a = 1\nb = 7\nc = 3\n"
    await editor.run("undo_edit", "pkg/mod.py")
    assert (await editor.sb.read_file("pkg/mod.py")) == b"a = 1\nb = 2\na = 1\nc = 3\n"
    with pytest.raises(ToolError, match="no edit history"):
        await editor.run("undo_edit", "pkg/mod.py")


async def test_insert_create_and_undo_create(editor: Editor) -> None:
    await editor.run("insert", "pkg/mod.py", insert_line=0, new_str="# top")
    assert (await editor.sb.read_file("pkg/mod.py")).startswith(b"# top\na = 1\n")
    with pytest.raises(ToolError, match="insert_line 99 must be between 0 and 6"):
        await editor.run("insert", "pkg/mod.py", insert_line=99, new_str="x")
    with pytest.raises(ToolError, match="insert needs insert_line and new_str"):
        await editor.run("insert", "pkg/mod.py", new_str="x")
    with pytest.raises(ToolError, match="already exists"):
        await editor.run("create", "pkg/mod.py", file_text="")
    await editor.run("create", "pkg/new.py", file_text="x = 1\n")
    assert await editor.sb.read_file("pkg/new.py") == b"x = 1\n"
    await editor.run("undo_edit", "pkg/new.py")
    with pytest.raises(ToolError, match="does not exist"):
        await editor.run("view", "pkg/new.py")


async def test_bad_commands_and_paths(editor: Editor) -> None:
    with pytest.raises(ToolError, match="unknown command 'delete'"):
        await editor.run("delete", "pkg/mod.py")
    with pytest.raises(ToolError, match=r"must not contain '\.\.'"):
        await editor.run("view", "../etc/passwd")
    with pytest.raises(ToolError, match="is not a file"):
        await editor.run("str_replace", "pkg", old_str="a", new_str="b")
