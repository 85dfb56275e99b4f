"""Sandbox admission control: at most ``concurrency`` starts in flight, starts begun no
faster than ``rate``, a bounded wait that ends in ``SandboxError`` (masked by a rollout,
never scored), for ``open_sandbox`` and the warm pool alike. A fake slow backend records
every start; the assertions are on structure (counts, lower bounds), never on how fast a
loaded machine happens to be."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import envhub
from envhub.errors import InvalidRequest, SandboxError
from envhub.policies import ReferencePolicy
from envhub.sandboxes import (
    AdmissionLimits,
    SandboxPool,
    SandboxSpec,
    admission_limits,
    admission_stats,
    configure_admission,
    open_sandbox,
)
from tests.rollout.helpers import run_episodes
from tests.sandboxes.slow_backends import SlowSandbox

SLOW = "tests.sandboxes.slow_backends:SlowSandbox"
BROKEN = "tests.sandboxes.slow_backends:BrokenSandbox"


@pytest.fixture(autouse=True)
def _limits() -> Iterator[None]:
    SlowSandbox.reset_record()
    yield
    configure_admission("test-slow", None)


async def _open_many(n: int, backend: str = SLOW) -> list[BaseException | None]:
    async def one() -> None:
        async with open_sandbox(SandboxSpec(), backend) as sb:
            assert (await sb.exec("true")).ok

    return await asyncio.gather(*(one() for _ in range(n)), return_exceptions=True)


async def test_at_most_concurrency_starts_in_flight() -> None:
    configure_admission("test-slow", AdmissionLimits(concurrency=3))
    assert await _open_many(12) == [None] * 12
    assert SlowSandbox.peak == 3  # the limit, and reached: the burst really queued
    stats = admission_stats("test-slow")
    assert (stats.admitted, stats.rejected, stats.in_flight, stats.peak_in_flight) == (12, 0, 0, 3)


async def test_starts_begin_no_faster_than_the_rate() -> None:
    rate, burst = 40.0, 3
    configure_admission("test-slow", {"concurrency": 64, "rate": rate, "burst": burst})
    SlowSandbox.reset_record(delay_s=0.0)
    assert await _open_many(14) == [None] * 14
    starts = sorted(SlowSandbox.starts)
    for k, t in enumerate(starts):
        # GCRA: the k-th start may begin (k - burst + 1) intervals after the first
        assert t - starts[0] >= (k - burst + 1) / rate * 0.95 - 1e-3, (k, t - starts[0])


async def test_waiting_past_the_bound_is_a_sandbox_error() -> None:
    configure_admission("test-slow", AdmissionLimits(concurrency=1, wait_s=0.1))
    SlowSandbox.reset_record(delay_s=0.4)
    results = await _open_many(2)
    errors = [r for r in results if r is not None]
    assert len(errors) == 1 and isinstance(errors[0], SandboxError)
    assert "not admitted within 0.1s (all start slots busy)" in str(errors[0])
    # the rate bound rejects at once, without taking a token the next start could use
    configure_admission("test-slow", AdmissionLimits(rate=0.5, burst=1, wait_s=0.5))
    SlowSandbox.reset_record(delay_s=0.0)
    results = await _open_many(3)
    assert sum(r is None for r in results) == 1
    assert all("over 0.5 starts/s" in str(r) for r in results if r is not None)
    assert admission_stats("test-slow").rejected == 2


async def test_the_warm_pool_respects_the_limit() -> None:
    configure_admission("test-slow", AdmissionLimits(concurrency=2))
    async with SandboxPool(
        SandboxSpec(), SLOW, min_idle=6, max_total=6, start_concurrency=6
    ) as pool:
        await pool.wait_idle(6, timeout=30)
        assert pool.metrics.idle == 6
    assert SlowSandbox.peak == 2


async def test_loops_in_other_threads_share_the_process_limit() -> None:
    """A plugin's pools run on their own loop thread: one limiter for the whole process."""
    configure_admission("test-slow", AdmissionLimits(concurrency=2))
    thread_results: list[list[BaseException | None]] = []
    thread = threading.Thread(target=lambda: thread_results.append(asyncio.run(_open_many(6))))
    thread.start()
    here = await _open_many(6)
    await asyncio.to_thread(thread.join)
    assert here == thread_results[0] == [None] * 6
    assert SlowSandbox.peak == 2


async def test_node_scope_shares_slots_through_lock_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVHUB_CACHE", str(tmp_path))
    configure_admission("test-slow", AdmissionLimits(concurrency=2, rate=100, scope="node"))
    assert await _open_many(8) == [None] * 8
    assert SlowSandbox.peak == 2
    files = sorted(p.name for p in (tmp_path / "sandbox-admission" / "test-slow").iterdir())
    assert files == ["bucket", "slot-0", "slot-1"]


def test_limits_come_from_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "ENVHUB_SANDBOX_ADMISSION", '{"*": {"concurrency": 5}, "test-slow": {"rate": 2}}'
    )
    assert admission_limits("test-slow").rate == 2.0
    assert admission_limits("local").concurrency == 5
    configure_admission("test-slow", {"concurrency": 7})  # the Python API wins
    assert admission_limits("test-slow").concurrency == 7
    monkeypatch.setenv("ENVHUB_SANDBOX_ADMISSION", '{"docker": {"rate": -1}}')
    with pytest.raises(InvalidRequest, match=r"'docker': rate: Input should be greater than 0$"):
        admission_limits("docker")
    monkeypatch.setenv("ENVHUB_SANDBOX_ADMISSION", "docker=5")
    with pytest.raises(InvalidRequest, match="ENVHUB_SANDBOX_ADMISSION is not JSON"):
        admission_limits("docker")


@pytest.mark.parametrize("backend", [BROKEN, SLOW])
async def test_a_start_that_fails_under_the_limit_masks_the_episode(backend: str) -> None:
    """A broken engine, or a start not admitted in time: retried, then masked, never 0."""
    # BROKEN: every admitted start fails; SLOW: 4 episodes at once, one slot, a 50 ms bound
    configure_admission(
        "test-slow", AdmissionLimits(concurrency=1, wait_s=30 if backend == BROKEN else 0.05)
    )
    SlowSandbox.reset_record(delay_s=0.01 if backend == BROKEN else 0.3)
    env = envhub.make("tests.sandboxes.slow_backends:SandboxedCalc", sandbox=backend)
    trajectories = await run_episodes(
        env, ReferencePolicy(), (await env.task_ids(None))[:4], max_env_attempts=2
    )
    masked = [t for t in trajectories if t.masked]
    assert len(trajectories) == 4 and masked
    assert SlowSandbox.peak == 1
    for t in masked:
        assert t.reward is None and t.stop_reason == "env_error"
        assert t.error is not None and t.error.kind == "sandbox_error"
        assert ("injected" if backend == BROKEN else "not admitted") in t.error.message
    if backend == BROKEN:
        assert len(masked) == 4
    assert all(t.reward == 1.0 for t in trajectories if not t.masked)


def test_serve_refuses_bad_limits_in_one_line() -> None:
    """``envhub serve --sandbox-admission`` checks its JSON before serving anything."""
    argv = [sys.executable, "-m", "envhub.cli", "serve", "calc", "--sandbox-admission"]
    bad = '{"docker": {"rate": 0}}'
    done = subprocess.run([*argv, bad], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr == (
        "error: sandbox admission limits for 'docker': rate: Input should be greater than 0\n"
    )
    env = {**os.environ, "ENVHUB_SANDBOX_ADMISSION": "docker=5"}
    done = subprocess.run([*argv[:-1]], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ENVHUB_SANDBOX_ADMISSION is not JSON: ")
    assert done.stderr.count("\n") == 1
