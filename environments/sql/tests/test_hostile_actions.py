"""Hostile SQL is the model's outcome: an error observation it reads, a session that stays
usable, and an episode that is scored, never masked (a masked episode is retried and
dropped, so a policy could use it to escape a bad reward).

Every case runs with the server-side executor (query worker processes) and in the
sandbox mode, whose runner is the same code in a sandbox process. The slow cases are
calls sqlite cannot interrupt from inside (one ``printf``/``trim``/``instr`` call):
they must still end at the query's limit.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from envhub_sql.connection import QueryResult
from envhub_sql.executor import make_executor
from envhub_sql.workers import WorkerPool

import envhub
from envhub import StepResult
from envhub.errors import SandboxError
from envhub.task import GoldCall
from envhub.testing import replay_calls

CallTool = Callable[..., Awaitable[StepResult]]  # the `call` fixture (conftest.py)

TIMEOUT_S = 1.0
STOPPED = f"ran longer than the {TIMEOUT_S:g} s limit and was stopped"
_MB_OF = "replace(hex(zeroblob({n})), '0', '{c}')"  # a string of 2n copies of c

#: id: (query, what the error observation says)
HOSTILE = {
    "megabyte-query": ("SELECT " + "1 + " * 250_000 + "1", "1000008 bytes long; the limit is"),
    "printf-loop": ("SELECT printf('%.*c', 2e9, 'x')", STOPPED),
    "quadratic-trim": (
        f"SELECT length(trim({_MB_OF.format(n=499_999, c='b')}, "
        f"{_MB_OF.format(n=60_000, c='a')} || 'b'))",
        STOPPED,
    ),
    "quadratic-instr": (
        f"SELECT instr({_MB_OF.format(n=2_500_000, c='a')}, "
        f"{_MB_OF.format(n=1_250_000, c='a')} || 'b')",
        STOPPED,
    ),
    "endless-cte": (
        "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r",
        STOPPED,
    ),
    "zeroblob": ("SELECT zeroblob(2000000000)", "too big"),
    "randomblob": ("SELECT length(randomblob(200000000))", "too big"),
    "huge-replace": (
        "SELECT length(replace(hex(zeroblob(4000000)), '0', '000000'))",
        "too big",
    ),
    "deep-nesting": ("SELECT " + "(" * 3000 + "1" + ")" * 3000, "nested too deeply"),
    "nul-character": ("SELECT 1\x00", "contains a NUL character"),
    "lone-surrogate": ("SELECT '\ud800'", "not valid Unicode"),
    "stacked-statement": ("SELECT 1; DROP TABLE track", "only a single statement"),
}

MODES = [
    None,
    "local",
    pytest.param(
        "bwrap",
        marks=pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
    ),
]


@pytest.mark.parametrize("sandbox", MODES)
@pytest.mark.parametrize(("query", "message"), HOSTILE.values(), ids=HOSTILE.keys())
async def test_hostile_query_is_an_error_and_the_session_goes_on(
    sandbox: str | None, query: str, message: str, call: CallTool
) -> None:
    env = envhub.make("sql", query_timeout_s=TIMEOUT_S, sandbox=sandbox)
    session = await env.open("chinook-0000")
    observation = (await call(session, "run_sql", query=query)).observations[0]
    assert observation.is_error, observation.content
    assert message in observation.content
    after = (await call(session, "run_sql", query="SELECT COUNT(*) FROM genre")).observations[0]
    assert after.content == "COUNT(*)\n25\n(1 row)"
    await session.close()


def _run_sql(query: object) -> GoldCall:
    return GoldCall(name="run_sql", arguments={"query": query})


#: one episode of hostile calls of every kind (sql allows 10 turns), ending in a hostile
#: submission; all of them are the model's doing
EPISODE = [
    _run_sql(HOSTILE["printf-loop"][0]),
    _run_sql(HOSTILE["megabyte-query"][0]),
    _run_sql(HOSTILE["nul-character"][0]),
    _run_sql(["SELECT 1"]),  # wrong argument type
    GoldCall(name="describe_table", arguments={"name": "track'; DROP TABLE track; --"}),
    GoldCall(name="drop_database", arguments={}),  # no such tool
    GoldCall(name="submit_sql", arguments={"query": HOSTILE["quadratic-trim"][0]}),
]


@pytest.mark.parametrize("sandbox", MODES)
async def test_an_episode_of_hostile_calls_is_scored_not_masked(sandbox: str | None) -> None:
    env = envhub.make("sql", query_timeout_s=TIMEOUT_S, sandbox=sandbox, invalid_reward=-1)
    trajectory = await replay_calls(env, "chinook-0000", EPISODE)
    assert not trajectory.masked, trajectory.error
    assert trajectory.metrics.episode_attempts == 1
    assert trajectory.stop_reason == "terminal_tool"
    assert trajectory.reward == -1.0  # the submission timed out: invalid, scored
    assert trajectory.reward_components == {"submitted": 1.0, "executed": 0.0}
    assert trajectory.metrics.tool_errors == len(EPISODE) - 1
    submitted = trajectory.messages[-1]
    assert submitted["role"] == "tool"
    assert f"Submission recorded but invalid: the query {STOPPED}" in submitted["content"]


def _query_worker_pids() -> set[int]:
    """This process's children running the query runner in worker mode."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and b"--serve" in cmdline.split(b"\0"):
            pids.add(int(entry.name))
    return pids


@pytest.mark.usefixtures("earlier_clients_freed")
async def test_shared_close_stops_the_query_workers(call: CallTool) -> None:
    env = envhub.make("sql")
    session = await env.open("chinook-0000")
    await call(session, "run_sql", query="SELECT 1")
    assert _query_worker_pids()
    await session.close()
    await env.aclose()
    assert not _query_worker_pids()
    again = await env.open("chinook-0000")  # a later query starts a worker again
    result = await call(again, "run_sql", query="SELECT 2")
    assert result.observations[0].content == "2\n2\n(1 row)"
    await again.close()


def test_a_query_running_through_a_close_does_not_keep_its_worker(tmp_path: Path) -> None:
    """The shared close while a query runs (another client's episode): its worker stops
    when the query ends instead of going back to the idle workers, which nothing would
    stop before the process exits."""
    db = tmp_path / "empty.sqlite"
    sqlite3.connect(db).close()
    pool = WorkerPool()
    before = _query_worker_pids()
    results: list[QueryResult] = []
    query = ("WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 3000000) "
             "SELECT count(*) FROM n")  # about a second of sqlite
    running = threading.Thread(
        target=lambda: results.append(pool.run(db, query, timeout_s=120.0, max_rows=None)))
    running.start()
    own: set[int] = set()
    while not own:
        own = _query_worker_pids() - before
        time.sleep(0.01)
    pool.close()
    running.join()
    assert results[0].rows == [(3000000,)]
    assert not _query_worker_pids() & own


async def test_a_worker_killed_while_idle_is_replaced(call: CallTool) -> None:
    """Not the next query's fault: it runs on a fresh worker."""
    session = await envhub.make("sql").open("chinook-0000")
    await call(session, "run_sql", query="SELECT 1")
    for pid in _query_worker_pids():
        os.kill(pid, signal.SIGKILL)
    result = await call(session, "run_sql", query="SELECT 2")
    assert result.observations[0].content == "2\n2\n(1 row)"
    await session.close()


async def test_a_worker_that_cannot_open_its_database_is_infrastructure(tmp_path: Path) -> None:
    executor = make_executor(tmp_path / "missing.sqlite", None)
    with pytest.raises(SandboxError, match="cannot open"):
        await executor.run("SELECT 1", timeout_s=TIMEOUT_S, max_rows=1)
