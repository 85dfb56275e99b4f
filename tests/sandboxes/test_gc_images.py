"""Leftover-container reaping and image recipes (docker parts need a real engine)."""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from envhub.errors import SandboxError
from envhub.sandboxes import SandboxSpec, open_sandbox
from envhub.sandboxes.images import (
    content_hash,
    image_tag,
    list_recipes,
    load_recipe,
    resolve_image,
)


def test_recipes_and_content_hash_tags() -> None:
    assert {"base", "python"} <= set(list_recipes())
    assert load_recipe("python").parent == "base"
    assert image_tag("base") == f"envhub/base:{content_hash('base')}"
    assert content_hash("python") != content_hash("base")
    assert resolve_image("python") == image_tag("python")
    assert resolve_image("debian:bookworm-slim") == "debian:bookworm-slim"
    with pytest.raises(SandboxError, match="no sandbox image recipe"):
        load_recipe("no-such-image")


def test_is_orphan_rules() -> None:
    from envhub.sandboxes.docker import owner_labels
    from envhub.sandboxes.gc import is_orphan

    mine = owner_labels("p", lifetime_s=3600)
    assert not is_orphan(mine)
    assert is_orphan({**mine, "envhub.expires": str(time.time() - 1)})
    dead = subprocess.Popen(["true"])
    dead.wait()
    assert is_orphan({**mine, "envhub.owner.pid": str(dead.pid)})
    assert is_orphan({**mine, "envhub.owner.start": "1"})  # pid recycled by another process
    assert not is_orphan({**mine, "envhub.owner.host": "elsewhere", "envhub.owner.pid": "1"})


def test_build_is_idempotent(require, monkeypatch: pytest.MonkeyPatch) -> None:
    require("docker")
    from envhub.sandboxes import images

    def no_rebuild(*a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError("an existing image must not be rebuilt")

    monkeypatch.setattr(images, "_import", no_rebuild)
    monkeypatch.setattr(images, "_run", no_rebuild)
    assert images.build("python", log=False) == image_tag("python")


async def test_python_image_has_python_pip_git(require) -> None:
    require("docker")
    from envhub.sandboxes.images import image_exists

    if not image_exists(image_tag("python")):
        if os.environ.get("ENVHUB_REQUIRE_DOCKER") == "1":
            pytest.fail("python image not built (run .ci/sandbox_setup.sh)")
        pytest.skip("python image not built")
    async with open_sandbox(SandboxSpec(image="python"), "docker") as sb:
        r = await sb.exec(
            "python3 -m pip --version && git --version && python3 -m venv --without-pip v",
            timeout=60,
        )
        assert r.exit_code == 0, r.stderr


async def test_gc_reaps_containers_of_a_crashed_process(require, our_containers) -> None:
    require("docker")
    from envhub.sandboxes.gc import gc_containers

    crash = textwrap.dedent(
        """
        import asyncio, os
        from envhub.sandboxes import SandboxSpec, make_sandbox
        async def main():
            sb = make_sandbox(SandboxSpec(), "docker")
            await sb.start()
            print(sb.container_id, flush=True)
            os._exit(1)  # crash without closing
        asyncio.run(main())
        """
    )
    run = functools.partial(subprocess.run, capture_output=True, text=True)
    out = await asyncio.to_thread(run, [sys.executable, "-c", crash])
    leaked = out.stdout.strip()
    assert leaked, out.stderr
    assert (await asyncio.to_thread(run, ["docker", "inspect", leaked])).returncode == 0
    async with open_sandbox(SandboxSpec(), "docker") as alive:
        report = gc_containers()
        assert leaked[:12] in report.removed
        assert report.kept >= 1  # our own live sandbox is not touched
        assert (await alive.exec("echo still here", timeout=30)).stdout == "still here\n"
    assert (await asyncio.to_thread(run, ["docker", "inspect", leaked])).returncode != 0
    assert our_containers() == []


def test_cli_sandbox_commands(require) -> None:
    from typer.testing import CliRunner

    from envhub.cli.sandbox import sandbox_app

    runner = CliRunner()
    res = runner.invoke(sandbox_app, ["build", "no-such-image"])
    assert res.exit_code == 1 and "no sandbox image recipe" in res.output
    require("docker")
    res = runner.invoke(sandbox_app, ["build", "base", "-q"])
    assert res.exit_code == 0 and image_tag("base") in res.output
    res = runner.invoke(sandbox_app, ["gc"])
    assert res.exit_code == 0 and res.output.startswith("removed ")


async def test_bwrap_runs_on_an_image_root(require) -> None:
    """``SandboxSpec(root=DIR)``: bwrap uses an exported image as its root file system."""
    require("bwrap")
    require("docker")
    from envhub.sandboxes.images import _export_image

    # world-traversable: as root, bwrap runs as an unprivileged uid that must reach it
    with tempfile.TemporaryDirectory(prefix="envhub-test-root-") as tmp:
        os.chmod(tmp, 0o755)
        root = Path(tmp)
        await asyncio.to_thread(_export_image, image_tag("base"), root)
        async with open_sandbox(SandboxSpec(root=root), "bwrap") as sb:
            r = await sb.exec("cut -d. -f1 /etc/debian_version; id -un; pwd", timeout=30)
            assert r.stdout.split() == ["12", "sandbox", "/work"], r.stderr
            assert (await sb.exec("touch /etc/x", timeout=30)).exit_code != 0


async def test_missing_image_is_a_sandbox_error(require, our_containers) -> None:  # type: ignore[no-untyped-def]
    require("docker")
    with pytest.raises(SandboxError, match="not found"):
        async with open_sandbox(SandboxSpec(image="envhub-test/missing:0"), "docker"):
            pass
    assert our_containers() == []
