"""envhub.runtime.cache.build_once: one build per artefact across threads, asyncio tasks and
processes; a failed or killed build leaves nothing half-built behind."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from envhub.runtime.cache import build_once, build_once_async, cache_root, locked
from envhub.testing import first_uses_at_once

#: a builder that records each run in ``builds`` and takes a while, to widen the race
_BUILDER = """
import time
from pathlib import Path
from envhub.runtime.cache import build_once

def builder(tmp: Path) -> None:
    with open({builds!r}, "a") as fh:
        fh.write(f"{{__import__('os').getpid()}}\\n")
    tmp.mkdir()
    for i in range(20):
        (tmp / f"part{{i}}").write_text("x" * 1000)
        time.sleep(0.01)
    (tmp / "complete").write_text("yes")

def first_use() -> None:
    out = build_once({artefact!r}, builder, stamp="v1")
    assert (out / "complete").read_text() == "yes", "a half-built artefact was returned"
    assert len(list(out.iterdir())) == 21
"""


def _script(tmp_path: Path) -> str:
    return _BUILDER.format(builds=str(tmp_path / "builds"), artefact=str(tmp_path / "a" / "art"))


def _builds(tmp_path: Path) -> list[str]:
    return (tmp_path / "builds").read_text().splitlines()


def test_threads_and_processes_build_once(tmp_path: Path) -> None:
    script = _script(tmp_path)
    namespace: dict[str, object] = {}
    exec(script, namespace)  # the same builder in this process's threads
    first_uses_at_once(namespace["first_use"], script, threads=6, processes=4)  # type: ignore[arg-type]
    assert len(_builds(tmp_path)) == 1
    # only the artefact and its lock and stamp are left: no scratch directories
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == ["art", "art.lock", "art.stamp"]


def test_asyncio_tasks_build_once(tmp_path: Path) -> None:
    builds: list[int] = []

    def builder(tmp: Path) -> None:
        builds.append(1)
        time.sleep(0.2)
        tmp.write_text("db")

    async def main() -> list[Path]:
        ticks = 0

        async def ticker() -> None:  # the loop stays responsive while tasks wait
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        tick_task = asyncio.create_task(ticker())
        paths = await asyncio.gather(
            *(build_once_async(tmp_path / "f.sqlite", builder) for _ in range(8))
        )
        tick_task.cancel()
        assert ticks > 1
        return paths

    paths = asyncio.run(main())
    assert builds == [1]
    assert {p.read_text() for p in paths} == {"db"}


def test_failed_build_leaves_nothing_and_next_use_builds(tmp_path: Path) -> None:
    target = tmp_path / "art"

    def broken(tmp: Path) -> None:
        tmp.mkdir()
        (tmp / "half").write_text("x")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        build_once(target, broken)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["art.lock"]
    assert build_once(target, lambda tmp: tmp.write_text("ok")).read_text() == "ok"


def test_killed_build_is_cleaned_up_and_rebuilt(tmp_path: Path) -> None:
    """A builder killed mid-way (SIGKILL: no cleanup runs) frees the lock with its process;
    the next use removes its scratch directory and builds again."""
    started = tmp_path / "started"
    code = f"""
import time
from pathlib import Path
from envhub.runtime.cache import build_once

def builder(tmp):
    tmp.mkdir()
    (tmp / "half").write_text("x")
    Path({str(started)!r}).touch()
    time.sleep(600)

build_once({str(tmp_path / "art")!r}, builder)
"""
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "builder did not start"
            time.sleep(0.01)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not (tmp_path / "art").exists()
    assert any(p.name.startswith(".art.build-") for p in tmp_path.iterdir())
    out = build_once(tmp_path / "art", lambda tmp: tmp.write_text("fresh"))
    assert out.read_text() == "fresh"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["art", "art.lock", "art.stamp", "started"]


def test_new_stamp_replaces_a_stale_artefact(tmp_path: Path) -> None:
    target = tmp_path / "venv"

    def make(version: str) -> Callable[[Path], None]:
        def builder(tmp: Path) -> None:
            tmp.mkdir()
            (tmp / "version").write_text(version)

        return builder

    build_once(target, make("1"), stamp="req==1")
    assert build_once(target, make("never"), stamp="req==1").joinpath("version").read_text() == "1"
    assert build_once(target, make("2"), stamp="req==2").joinpath("version").read_text() == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["venv", "venv.lock", "venv.stamp"]


def test_an_artefact_without_its_stamp_is_rebuilt(tmp_path: Path) -> None:
    """A directory left by an older builder (or renamed in but never stamped) is stale."""
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "partial").write_text("x")
    out = build_once(tmp_path / "repo", lambda tmp: tmp.mkdir())
    assert list(out.iterdir()) == []


def test_builder_must_create_the_artefact(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="created nothing"):
        build_once(tmp_path / "x", lambda tmp: None)
    assert not (tmp_path / "x.stamp").exists()


def test_locked_excludes_other_processes(tmp_path: Path) -> None:
    """``locked`` alone (for artefacts that are not files, like docker images)."""
    marker = tmp_path / "released"
    code = f"""
from pathlib import Path
from envhub.runtime.cache import locked
print("waiting", flush=True)
with locked({str(tmp_path / "image")!r}):
    print("inside after release:", Path({str(marker)!r}).exists(), flush=True)
"""
    with locked(tmp_path / "image"):
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline() == "waiting\n"
        time.sleep(0.3)  # the child is at the lock now; it must not get in
        marker.touch()
    assert proc.communicate(timeout=60)[0] == "inside after release: True\n"


def test_cache_root_follows_envhub_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ENVHUB_CACHE", str(tmp_path))
    assert cache_root("sql") == tmp_path / "sql"
    monkeypatch.delenv("ENVHUB_CACHE")
    assert cache_root() == Path.home() / ".cache" / "envhub"
