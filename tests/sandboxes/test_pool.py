"""SandboxPool: warm starts, one episode per sandbox, bounded size, retried failures."""

from __future__ import annotations

import asyncio

import pytest

from envhub.errors import SandboxError
from envhub.sandboxes import SandboxPool, SandboxSpec


async def _until(cond, what: str, tries: int = 300) -> None:  # type: ignore[no-untyped-def]
    for _ in range(tries):
        if cond():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


async def test_acquire_release_refill(backend: str, spec: SandboxSpec) -> None:
    async with SandboxPool(spec, backend, min_idle=2, max_total=3) as pool:
        await pool.wait_idle(2, timeout=60)
        sb = await pool.acquire()
        assert not sb.closed
        assert (await sb.exec("echo warm", timeout=30)).stdout == "warm\n"
        await sb.write_file("episode.txt", "state of episode 1")
        await pool.release(sb)
        assert sb.closed  # destroyed, never handed to another episode
        await _until(lambda: pool.metrics.idle == 2, "pool refilled")
        others = [await pool.acquire() for _ in range(2)]
        assert all(o is not sb for o in others)
        for o in others:
            r = await o.exec("cat episode.txt", timeout=30)
            assert r.exit_code != 0  # no state from the previous episode
            await pool.release(o)
        m = pool.metrics
        assert m.acquired == 3 and m.released == 3 and m.start_failures == 0
        if backend == "docker":  # containers carry the pool's name for gc --pool
            from envhub.sandboxes.docker import get_client

            await pool.wait_idle(2, timeout=60)
            found = get_client().api.containers(filters={"label": f"envhub.pool={pool.name}"})
            idle_ids = {sb.container_id for sb in pool._idle}
            assert idle_ids and idle_ids <= {c["Id"] for c in found}


async def test_never_exceeds_max_total(backend: str, spec: SandboxSpec) -> None:
    seen = []
    async with SandboxPool(spec, backend, min_idle=2, max_total=3) as pool:
        held = []
        for _ in range(3):
            held.append(await pool.acquire())
            seen.append(pool.total)
        with pytest.raises(SandboxError):
            await pool.acquire(timeout=0.5)
        seen.append(pool.total)
        await pool.release(held.pop())
        held.append(await pool.acquire(timeout=60))  # a slot freed: a new one starts
        seen.append(pool.total)
        for sb in held:
            await pool.release(sb)
    assert max(seen) <= 3
    assert all(sb.closed for sb in held)


@pytest.mark.parametrize("max_total", [3, 8])
async def test_the_pool_starts_exactly_what_is_wanted(spec: SandboxSpec, max_total: int) -> None:
    """In use + ``min_idle``, capped at ``max_total``, never more. Regressions: a sandbox
    taken by a waiter was briefly neither idle nor in use, and a served waiter still
    counted as waiting, so the filler started one too many (about 1 run in 20)."""
    for _ in range(20):
        async with SandboxPool(spec, "local", min_idle=2, max_total=max_total) as pool:
            held = [await pool.acquire() for _ in range(3)]
            await asyncio.sleep(0.02)  # let the filler react to the last hand-out
            m = pool.metrics
            assert m.started + m.starting == min(max_total, 3 + 2), m
            for sb in held:
                await pool.release(sb)


async def test_close_destroys_idle_and_in_use(spec: SandboxSpec) -> None:
    pool = SandboxPool(spec, "local", min_idle=2, max_total=4)
    await pool.start()
    sb = await pool.acquire()
    await _until(lambda: pool.metrics.idle == 2, "warm")
    idle = list(pool._idle)
    await pool.close()
    assert sb.closed and all(i.closed for i in idle)
    with pytest.raises(SandboxError):
        await pool.acquire()


async def test_failed_starts_are_retried_and_reported(tmp_path) -> None:  # type: ignore[no-untyped-def]
    missing = tmp_path / "not-yet"
    pool = SandboxPool(
        SandboxSpec(),
        "local",
        min_idle=1,
        max_total=2,
        backoff_s=(0.05, 0.2),
        base_dir=str(missing),
    )
    async with pool:
        with pytest.raises(SandboxError, match="last start error"):
            await pool.acquire(timeout=1.0)
        m = pool.metrics
        assert m.start_failures >= 2 and m.last_error and m.started == 0
        missing.mkdir()  # the cause goes away: the retry loop recovers
        sb = await pool.acquire(timeout=30)
        assert (await sb.exec("echo ok", timeout=30)).stdout == "ok\n"
        assert pool.metrics.consecutive_failures == 0
        await pool.release(sb)


async def test_idle_sandboxes_past_their_lifetime_are_replaced(spec: SandboxSpec) -> None:
    short = spec.model_copy(update={"max_lifetime_s": 0.3})
    async with SandboxPool(short, "local", min_idle=2, max_total=2) as pool:
        await pool.wait_idle(2, timeout=30)
        first = list(pool._idle)
        await _until(lambda: all(sb.closed for sb in first), "idle sandboxes expired")
        sb = await pool.acquire(timeout=30)
        assert sb not in first  # an expired sandbox is never handed out
        assert pool.metrics.expired >= 1
        await pool.release(sb)
