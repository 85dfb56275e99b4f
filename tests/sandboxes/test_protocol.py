"""The Sandbox protocol, identical on every backend (local, bwrap, docker)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from envhub.errors import FileOperationError, InvalidRequest, SandboxError
from envhub.sandboxes import ExecResult, SandboxSpec, open_sandbox, resolve_backend


async def test_exec_captures_streams_and_exit_code(backend: str, spec: SandboxSpec) -> None:
    async with open_sandbox(spec, backend) as sb:
        r = await sb.exec("echo out; echo err >&2; exit 3", timeout=30)
        assert isinstance(r, ExecResult)
        assert (r.exit_code, r.stdout, r.stderr) == (3, "out\n", "err\n")
        assert not r.timed_out and not r.oom_killed and not r.stdout_truncated
        assert r.duration_s > 0


async def test_exec_argv_stdin_workdir_env(backend: str) -> None:
    spec = SandboxSpec(env={"FROM_SPEC": "s"})
    async with open_sandbox(spec, backend) as sb:
        r = await sb.exec(["cat"], timeout=30, stdin=b"piped \x00 bytes")
        assert r.stdout == "piped \x00 bytes"
        r = await sb.exec("echo $FROM_SPEC-$FROM_CALL", timeout=30, env={"FROM_CALL": "c"})
        assert r.stdout == "s-c\n"
        await sb.write_file("sub/marker", "x")
        r = await sb.exec("ls", timeout=30, workdir=f"{spec.workdir}/sub")
        assert r.stdout.split() == ["marker"]
        r = await sb.exec("pwd", timeout=30)
        assert r.stdout.strip().endswith("work")


async def test_timeout_is_reported_and_sandbox_survives(backend: str, spec: SandboxSpec) -> None:
    async with open_sandbox(spec, backend) as sb:
        r = await sb.exec("sleep 30", timeout=1)
        assert r.timed_out and r.exit_code != 0
        assert (await sb.exec("echo alive", timeout=30)).stdout == "alive\n"


async def test_commands_that_cannot_start_are_results(backend: str, spec: SandboxSpec) -> None:
    """A missing program, a file that is no program, an argument over the kernel's limit:
    the command fails as a shell would report it; the sandbox does not (SandboxError)."""
    async with open_sandbox(spec, backend) as sb:
        assert (await sb.exec(["no-such-program"], timeout=30)).exit_code == 127
        assert (await sb.exec(["/etc/passwd"], timeout=30)).exit_code == 126
        too_long = await sb.exec(["echo", "x" * 300_000], timeout=30)
        assert too_long.exit_code != 0 and "argument list too long" in too_long.stderr.lower()
        assert (await sb.exec("echo alive", timeout=30)).stdout == "alive\n"


async def test_output_is_capped_keeping_head_and_tail(backend: str) -> None:
    spec = SandboxSpec(output_limit=1024)
    async with open_sandbox(spec, backend) as sb:
        r = await sb.exec(
            "echo START; head -c 5000 /dev/zero | tr '\\0' x; echo; echo END", timeout=30
        )
        assert r.stdout_truncated and not r.stderr_truncated
        assert r.stdout_bytes == len("START\n") + 5000 + len("\nEND\n")
        assert r.stdout.startswith("START\n") and r.stdout.endswith("END\n")
        assert "bytes truncated]" in r.stdout
        assert len(r.stdout) < 1024 + 100


async def test_files_roundtrip(backend: str, spec: SandboxSpec) -> None:
    blob = bytes(range(256)) * 100
    async with open_sandbox(spec, backend) as sb:
        await sb.write_file("deep/dir/blob.bin", blob)
        assert await sb.read_file("deep/dir/blob.bin") == blob
        await sb.write_file(f"{spec.workdir}/abs.txt", "absolute")
        r = await sb.exec("cat abs.txt; echo; wc -c < deep/dir/blob.bin", timeout=30)
        assert r.stdout.split() == ["absolute", "25600"]
        await sb.write_file("/tmp/t.txt", "in tmp")
        assert await sb.read_file("/tmp/t.txt") == b"in tmp"
        # the operation failed, the sandbox did not: not a SandboxError (which masks)
        with pytest.raises(FileOperationError, match="missing") as missing:
            await sb.read_file("missing.txt")
        assert not isinstance(missing.value, SandboxError)
        with pytest.raises(FileOperationError, match="larger than 1000 bytes"):
            await sb.read_file("deep/dir/blob.bin", max_bytes=1000)
        with pytest.raises(FileOperationError, match="download_dir"):
            await sb.download_dir("no-such-dir", "/nonexistent-envhub-target")
        assert (await sb.exec("echo usable", timeout=30)).stdout == "usable\n"


async def test_upload_and_download_dir(backend: str, spec: SandboxSpec, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("print('hi')\n")
    (src / "README").write_bytes(b"\x00\x01readme")
    async with open_sandbox(spec, backend) as sb:
        await sb.upload_dir(src, "repo")
        r = await sb.exec("find . -type f | sort", timeout=30, workdir=f"{spec.workdir}/repo")
        assert r.stdout.split() == ["./README", "./pkg/mod.py"]
        await sb.exec("echo new > repo/pkg/new.txt && ln -s /etc/passwd repo/link", timeout=30)
        out = tmp_path / "out"
        await sb.download_dir("repo", out)
    assert (out / "pkg" / "new.txt").read_text() == "new\n"
    assert (out / "README").read_bytes() == b"\x00\x01readme"
    assert not (out / "link").is_symlink()  # absolute link skipped, not followed


async def test_close_is_idempotent_and_final(backend: str, spec: SandboxSpec) -> None:
    async with open_sandbox(spec, backend) as sb:
        pass
    assert sb.closed
    await sb.close()
    with pytest.raises(SandboxError):
        await sb.exec("true", timeout=5)


async def test_max_lifetime_closes_the_sandbox(backend: str) -> None:
    async with open_sandbox(SandboxSpec(max_lifetime_s=0.5), backend) as sb:
        for _ in range(100):
            if sb.closed:
                break
            await asyncio.sleep(0.1)
        with pytest.raises(SandboxError):
            await sb.exec("true", timeout=5)


async def test_concurrent_execs(backend: str, spec: SandboxSpec) -> None:
    async with open_sandbox(spec, backend) as sb:
        results = await asyncio.gather(*(sb.exec(f"echo {i}", timeout=30) for i in range(8)))
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(8)]


def test_resolve_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENVHUB_SANDBOX", raising=False)
    assert resolve_backend(None) == "local"
    monkeypatch.setenv("ENVHUB_SANDBOX", "bwrap")
    assert resolve_backend(None) == "bwrap"
    assert resolve_backend("docker") == "docker"
    with pytest.raises(InvalidRequest):
        resolve_backend("vm")


def test_spec_validation() -> None:
    s = SandboxSpec(memory="1GiB", disk=2048 * 1024 * 1024)
    assert int(s.memory) == 1 << 30 and s.network is False
    with pytest.raises(ValueError):
        SandboxSpec(workdir="relative")
    with pytest.raises(ValueError):
        SandboxSpec(workdir="/")
    with pytest.raises(ValueError):
        SandboxSpec(cpus=0)


def test_import_does_not_import_docker() -> None:
    import subprocess
    import sys

    code = "import sys, envhub.sandboxes; print('docker' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
