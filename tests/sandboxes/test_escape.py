"""Escape and abuse suite for the backends that claim isolation (bwrap, docker).

Each test pairs the attack with a control that shows the probe itself works (the host
*can* connect, *can* see the process...), so a broken probe cannot pass silently.
"""

from __future__ import annotations

import asyncio
import os
import resource
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from envhub.errors import FileOperationError, SandboxError
from envhub.sandboxes import Sandbox, SandboxSpec, open_sandbox

# bash's /dev/tcp gives a TCP client without needing python/nc in the image.
CONNECT = "timeout 5 bash -c 'exec 3<>/dev/tcp/{host}/{port}' && echo CONNECTED"


@pytest.fixture
async def tcp_server():
    """A real listener on a host loopback port."""
    accepted = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(True)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield port, accepted
    server.close()
    await server.wait_closed()


async def test_no_network(isolated_backend: str, spec: SandboxSpec, tcp_server) -> None:
    port, accepted = tcp_server
    # control: the probe reaches the listener from the host (local backend)
    async with open_sandbox(spec, "local") as host:
        r = await host.exec(CONNECT.format(host="127.0.0.1", port=port), timeout=10)
        assert "CONNECTED" in r.stdout and accepted
    accepted.clear()
    async with open_sandbox(spec, isolated_backend) as sb:
        r = await sb.exec(CONNECT.format(host="127.0.0.1", port=port), timeout=10)
        assert r.exit_code != 0 and "CONNECTED" not in r.stdout
        r = await sb.exec(CONNECT.format(host="1.1.1.1", port=53), timeout=10)
        assert r.exit_code != 0 and "CONNECTED" not in r.stdout
        assert not r.timed_out  # no route: fails at once, not by timing out
    assert not accepted


async def test_cannot_write_outside_workdir_and_tmp(
    isolated_backend: str, spec: SandboxSpec
) -> None:
    name = f"envhub-escape-{uuid.uuid4().hex[:8]}"
    targets = [f"/{name}", f"/etc/{name}", f"/usr/{name}", f"/var/{name}", f"/home/{name}"]
    async with open_sandbox(spec, isolated_backend) as sb:
        r = await sb.exec(
            f"echo ok > {spec.workdir}/w && echo ok > /tmp/t && echo writable", timeout=30
        )
        assert r.stdout == "writable\n"  # control
        for t in targets:
            r = await sb.exec(f"echo pwned > {t}", timeout=30)
            assert r.exit_code != 0, t
        r = await sb.exec("echo pwned >> /etc/passwd", timeout=30)
        assert r.exit_code != 0
    assert not any(await asyncio.to_thread(lambda: [os.path.exists(t) for t in targets]))


async def test_cannot_see_host_processes(
    isolated_backend: str, spec: SandboxSpec, host_sees
) -> None:
    marker = f"{uuid.uuid4().int % 10**6 + 10**6}.25"
    host_proc = await asyncio.create_subprocess_exec("sleep", marker)
    try:
        assert await host_sees(marker)  # control
        async with open_sandbox(spec, isolated_backend) as sb:
            r = await sb.exec(
                "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done", timeout=30
            )
            assert r.exit_code == 0 and r.stdout.strip()
            assert marker not in r.stdout
            assert len(r.stdout.splitlines()) < 20
    finally:
        host_proc.kill()
        await host_proc.wait()


@pytest.mark.parametrize(
    "bomb",
    ["f(){ f | f & }; f", "f(){ sleep 600 & f & }; f"],  # classic; copies that stay
    ids=["classic", "lingering"],
)
async def test_fork_bomb_is_contained(isolated_backend: str, bomb: str) -> None:
    spec = SandboxSpec(pids=64, memory="256MiB")
    async with open_sandbox(spec, isolated_backend) as sb:
        # wait until the bomb has hit the limit, however long it takes to get there on a
        # loaded machine (a fixed 3 s was too short under CI), then pass its errors on
        waiting = (
            "for i in $(seq 60); do grep -qi 'cannot fork' $e && break; sleep 0.25; done;"
            " cat $e >&2"
        )
        r = await sb.exec(f"e=$(mktemp); ({bomb}) 2>$e; {waiting}; echo survived", timeout=20)
        assert "cannot fork" in r.stderr.lower() or r.timed_out  # the pids limit bit
        # the bomb's copies ended with the command: the rest of the episode has its pids
        # (a SandboxError here would mask the episode: a policy could escape its reward)
        alive = await sb.exec("echo alive; ls -d /proc/[0-9]* | wc -l", timeout=30)
        assert alive.stdout.startswith("alive\n"), alive
        assert int(alive.stdout.split()[1]) < 10, alive.stdout  # init, keeper, this command
        assert (await sb.exec(["sh", "-c", "cat"], timeout=30, stdin="stdin too")).ok
    # the host can still fork
    proc = await asyncio.create_subprocess_exec("true")
    assert await proc.wait() == 0


async def test_background_children_end_with_their_exec(
    isolated_backend: str, spec: SandboxSpec, host_sees
) -> None:
    marker = f"{uuid.uuid4().int % 10**6 + 10**6}.75"
    async with open_sandbox(spec, isolated_backend) as sb:
        r = await sb.exec(
            f"sleep {marker} > /dev/null 2>&1 & sleep 0.5; tr '\\0' ' ' < /proc/$!/cmdline",
            timeout=30,
        )
        assert marker in r.stdout  # control: it ran in the background
        for _ in range(50):
            if not await host_sees(marker):
                break
            await asyncio.sleep(0.1)
        assert not await host_sees(marker)


async def test_commands_cannot_stop_their_sandbox(isolated_backend: str, spec: SandboxSpec) -> None:
    """Signalling the init, the keeper or every process: the command may kill itself,
    never the sandbox (a dead sandbox is an infrastructure failure that masks)."""
    async with open_sandbox(spec, isolated_backend) as sb:
        for attack in ("kill -TERM 1", "kill -KILL 1", "kill -TERM -1", "kill -KILL -1"):
            await sb.exec(f"{attack}; sleep 0.5", timeout=30)
            alive = await sb.exec("echo alive", timeout=30)
            assert alive.stdout == "alive\n", attack
        # a workdir locked by its commands fails the commands that need it (a result)
        await sb.exec(f"chmod 000 {spec.workdir}", timeout=30)
        await sb.exec("ls", timeout=30)
        assert (await sb.exec(f"chmod 755 {spec.workdir}", timeout=30, workdir="/tmp")).ok
        assert (await sb.exec("echo alive", timeout=30)).stdout == "alive\n"


async def test_failed_file_operations_are_not_sandbox_failures(
    backend: str, spec: SandboxSpec, tmp_path: Path
) -> None:
    """What the sandbox may not read or write fails as a ``FileOperationError`` (the
    model's outcome), never as a ``SandboxError`` (a broken sandbox, which masks)."""
    (tmp_path / "f").write_text("x")
    async with open_sandbox(spec, backend) as sb:
        # these fail on every backend, also for root on the host (local: no isolation)
        attempts: dict[str, Callable[[], Awaitable[object]]] = {
            "read /proc/1/mem": lambda: sb.read_file("/proc/1/mem"),
            "write into /proc": lambda: sb.write_file("/proc/envhub-evil", "x"),
            "read a missing file": lambda: sb.read_file("no/such/file"),
        }
        if backend != "local":
            attempts |= {
                "read /etc/shadow": lambda: sb.read_file("/etc/shadow"),
                "write /etc": lambda: sb.write_file("/etc/envhub-evil", "pwned"),
                "upload to /usr": lambda: sb.upload_dir(tmp_path, "/usr/envhub-evil"),
            }
        for what, attempt in attempts.items():
            with pytest.raises(FileOperationError) as failed:
                await attempt()
            assert not isinstance(failed.value, SandboxError), what
        assert (await sb.exec("echo usable", timeout=30)).stdout == "usable\n"
        await sb.write_file("ok.txt", "fine")
        assert await sb.read_file("ok.txt") == b"fine"


async def test_memory_bomb_is_oom_killed(isolated_backend: str) -> None:
    spec = SandboxSpec(memory="64MiB")
    async with open_sandbox(spec, isolated_backend) as sb:
        small = await sb.exec("head -c 8m /dev/zero | tail -c 1 | wc -c", timeout=60)
        assert small.ok and not small.oom_killed  # control: within the limit
        # tail keeps the whole newline-free input in memory
        r = await sb.exec(
            "head -c 512m /dev/zero | tail -c 1 > /dev/null; "
            "head -c 512m /dev/zero | tail > /dev/null",
            timeout=60,
        )
        assert r.oom_killed and r.exit_code != 0
        assert (await sb.exec("echo alive", timeout=30)).stdout == "alive\n"


async def test_infinite_loop_is_killed_at_timeout(
    isolated_backend: str, spec: SandboxSpec, host_sees
) -> None:
    marker = f"spin-{uuid.uuid4().hex[:8]}"
    async with open_sandbox(spec, isolated_backend) as sb:
        r = await sb.exec(f"while :; do :; done # {marker}", timeout=2)
        assert r.timed_out and r.exit_code != 0
        # the loop is gone (host view: sandbox processes are visible from the host),
        # not just abandoned while the sandbox stays open
        for _ in range(50):
            if not await host_sees(marker):
                break
            await asyncio.sleep(0.1)
        assert not await host_sees(marker)
        assert (await sb.exec("echo alive", timeout=30)).stdout == "alive\n"


async def test_huge_stdout_is_truncated_without_host_memory(
    isolated_backend: str, spec: SandboxSpec
) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    async with open_sandbox(spec, isolated_backend) as sb:
        r = await sb.exec("head -c 1G /dev/zero", timeout=120)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert r.stdout_truncated and r.stdout_bytes == 1 << 30
    assert len(r.stdout) < int(spec.output_limit) + 100
    assert (after - before) * 1024 < 200 * 1024 * 1024  # peak RSS grew < 200 MiB


async def test_background_process_gone_after_close(
    isolated_backend: str, spec: SandboxSpec, host_sees
) -> None:
    marker = f"{uuid.uuid4().int % 10**6 + 10**6}.5"
    sb: Sandbox
    async with open_sandbox(spec, isolated_backend) as sb:
        # setsid: out of the command's process group, so it outlives its exec (docker),
        # once it has left the group (the sleep gives it time to)
        r = await sb.exec(f"setsid sleep {marker} > /dev/null 2>&1 & sleep 1", timeout=30)
        assert r.exit_code == 0
        if isolated_backend == "docker":
            assert await host_sees(marker)  # control: it does run in the background
    for _ in range(50):
        if not await host_sees(marker):
            break
        await asyncio.sleep(0.1)
    assert not await host_sees(marker)


async def test_bwrap_rlimit_fallback_without_cgroups(require) -> None:  # type: ignore[no-untyped-def]
    """Where the cgroup fs is not writable, bwrap falls back to rlimits: bombs still fail."""
    require("bwrap")
    spec = SandboxSpec(pids=64, memory="64MiB")
    async with open_sandbox(spec, "bwrap", cgroups=False) as sb:
        assert sb.cgroup is None  # type: ignore[attr-defined]
        ok = await sb.exec("head -c 8m /dev/zero | tail -c 1 | wc -c", timeout=30)
        assert ok.exit_code == 0  # control
        r = await sb.exec("head -c 512m /dev/zero | tail > /dev/null", timeout=60)
        assert r.exit_code != 0 and not r.oom_killed  # RLIMIT_AS: ENOMEM, not an OOM kill
        r = await sb.exec("f(){ f | f & }; f; sleep 2; echo survived", timeout=8)
        assert "cannot fork" in r.stderr.lower() or r.timed_out
        assert (await sb.exec("echo alive", timeout=30)).stdout == "alive\n"


async def test_bwrap_cpu_quota_throttles_a_busy_loop(require) -> None:  # type: ignore[no-untyped-def]
    """``cpus`` becomes a CFS quota: a busy loop at cpus=0.1 is throttled by the kernel
    (read from the cgroup's own counters, not timed); with room for two CPUs it is not."""
    require("bwrap")
    throttled = {}
    for cpus in (0.1, 2.0):
        async with open_sandbox(SandboxSpec(cpus=cpus), "bwrap") as sb:
            cgroup = sb.cgroup  # type: ignore[attr-defined]
            if cgroup is None or not cgroup.cpu_limited:
                if os.environ.get("ENVHUB_REQUIRE_BWRAP") == "1":
                    pytest.fail("ENVHUB_REQUIRE_BWRAP=1 but cpus was not enforced")
                pytest.skip("no writable cpu cgroup controller here")
            r = await sb.exec("timeout 1 sh -c 'while :; do :; done'; true", timeout=30)
            assert r.exit_code == 0
            stat = (cgroup.dirs[-1] / "cpu.stat").read_text().split()
            throttled[cpus] = int(stat[stat.index("nr_throttled") + 1])
    assert throttled[0.1] > 0 and throttled[2.0] == 0, throttled


async def test_bwrap_disk_cap_is_total_and_shared_with_tmp(require) -> None:  # type: ignore[no-untyped-def]
    """As root, the workdir and /tmp share a tmpfs of ``disk`` bytes: many small files
    hit ENOSPC (RLIMIT_FSIZE alone caps only single files), and the mount goes at close."""
    require("bwrap")
    if os.geteuid() != 0:
        pytest.skip("the tmpfs needs root")
    async with open_sandbox(SandboxSpec(disk="4MiB"), "bwrap") as sb:
        assert sb.disk_limited  # type: ignore[attr-defined]
        root = str(sb.root)  # type: ignore[attr-defined]
        r = await sb.exec(
            "head -c 3m /dev/zero > /tmp/big && i=0 && "
            "while head -c 64k /dev/zero > small$i; do i=$((i+1)); done; echo files=$i",
            timeout=60,
        )
        assert "No space left on device" in r.stderr
        files = int(r.stdout.strip().removeprefix("files="))
        assert 0 < files <= 16  # /tmp's 3 MiB count against the same 4 MiB (else 64)
        assert (await sb.exec("rm /tmp/big small*; echo kept > /tmp/x", timeout=30)).ok
        assert (await sb.exec("cat /tmp/x", timeout=30)).stdout == "kept\n"  # across execs
        assert root in _tmpfs_mounts()
    assert root not in _tmpfs_mounts() and not _exists(root)


def _exists(path: str) -> bool:
    return os.path.exists(path)


def _tmpfs_mounts() -> set[str]:
    from envhub.sandboxes._tmpfs import SOURCE

    with open("/proc/self/mounts") as mounts:
        return {line.split()[1] for line in mounts if line.split()[0] == SOURCE}


async def test_gc_reaps_bwrap_dirs_of_a_crashed_process(require) -> None:  # type: ignore[no-untyped-def]
    require("bwrap")
    from envhub.sandboxes.gc import gc_bwrap_dirs

    crash = (
        "import asyncio, os\n"
        "from envhub.sandboxes import SandboxSpec, make_sandbox\n"
        "async def main():\n"
        "    sb = make_sandbox(SandboxSpec(), 'bwrap')\n"
        "    await sb.start()\n"
        "    print(sb.root, flush=True)\n"
        "    os._exit(1)  # crash without closing\n"
        "asyncio.run(main())\n"
    )
    out = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", crash], capture_output=True, text=True
    )
    leaked = out.stdout.strip()
    assert leaked and _exists(leaked), out.stderr
    async with open_sandbox(SandboxSpec(), "bwrap") as alive:
        assert leaked in gc_bwrap_dirs()
        assert (await alive.exec("echo still here", timeout=30)).stdout == "still here\n"
    assert not _exists(leaked) and leaked not in _tmpfs_mounts()


async def test_gc_removes_local_dirs_of_dead_owners(tmp_path: Path) -> None:
    """``envhub sandbox gc`` removes the directories of ``local`` sandboxes whose owner was
    killed without closing them (nothing else ever would); a live owner's stay."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    crash = (
        "import asyncio, os\n"
        "from envhub.sandboxes import SandboxSpec, make_sandbox\n"
        "async def main():\n"
        "    sb = make_sandbox(SandboxSpec(), 'local')\n"
        "    await sb.start()\n"
        "    print(sb.root, flush=True)\n"
        "    os._exit(1)  # killed without closing\n"
        "asyncio.run(main())\n"
    )
    out = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", crash], capture_output=True, text=True, env=env
    )
    leaked = out.stdout.strip()
    assert leaked.startswith(str(tmp_path)) and _exists(leaked), out.stderr
    async with open_sandbox(SandboxSpec(), "local", base_dir=str(tmp_path)) as alive:
        gc = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "envhub.cli", "sandbox", "gc"],
            capture_output=True,
            text=True,
            env=env,
        )
        assert gc.returncode == 0, gc.stderr
        assert "1 local directories" in gc.stdout
        assert not _exists(leaked)
        assert (await alive.exec("echo still here", timeout=30)).stdout == "still here\n"
