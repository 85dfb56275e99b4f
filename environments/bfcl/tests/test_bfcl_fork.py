"""A fork of a multi-turn BFCL episode: each child gets backends of its own, rebuilt
from the calls the parent's ran, so its file system starts where the parent's stands
and then goes its own way."""

from __future__ import annotations

import envhub
from envhub.testing import call_tool


async def test_children_start_from_the_parents_backends_and_diverge() -> None:
    env = envhub.make("bfcl", categories="base")
    try:
        async with env.open("multi_turn_base_0") as parent:
            await call_tool(parent, "cd", folder="document")
            listing = (await call_tool(parent, "ls")).observations[0].content
            first, second = await parent.fork(2)
            await call_tool(first, "mkdir", dir_name="forked")
            assert "forked" in (await call_tool(first, "ls")).observations[0].content
            for other in (second, parent):
                assert (await call_tool(other, "ls")).observations[0].content == listing
            for child in (first, second):
                await child.abort()
    finally:
        await env.aclose()
