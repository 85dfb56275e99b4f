"""The scoring workers hold even when code in an answer runs in them.

These tests hand :class:`ScorerPool` answers the screen would refuse, as if it had let
one through: the code forges replies on every file descriptor (the worker's channel
included, and through ``/proc``), reads the server's secrets, writes a host file, loops,
and allocates past its allowance. A forgery never reaches another request, no secret or
text the answer made comes back, and a score's memory and time are bounded; with the
per-score child on the host and under bubblewrap."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from envhub_reasoning_gym.scoring import Outcome, ScorerPool
from reasoning_gym.factory import create_dataset

from envhub.errors import SandboxError
from envhub.sandboxes.bwrap import bwrap_problem

TOKEN = "envhub-confinement-test-token-93ab"
CONFIG = json.dumps({"seed": 0, "size": 1}, sort_keys=True)
#: every error a worker may return: fixed phrases, a built-in exception name at most
ERRORS = re.compile(
    r"scoring took longer than \d+(\.\d+)?s|"
    r"the scoring process (died \(a crash or a resource limit\)|sent an unexpected reply)|"
    r"score_answer raised ([A-Z][A-Za-z]*|an exception)|"
    r"score_answer returned a value that is not a float in \[0, 1\]"
)


@pytest.fixture(params=["process", "bwrap"])
def pool(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[ScorerPool]:
    if request.param == "bwrap" and (problem := bwrap_problem()):
        if os.environ.get("ENVHUB_REQUIRE_BWRAP") == "1":
            pytest.fail(f"bwrap required (ENVHUB_REQUIRE_BWRAP=1) but {problem}")
        pytest.skip(problem)
    monkeypatch.setenv("ENVHUB_TOKEN", TOKEN)  # in the server's environment, as `serve` has it
    scorers = ScorerPool(1, bwrap=request.param == "bwrap", memory_bytes=256 << 20)
    yield scorers
    scorers.close()


def _code_answer(code: str) -> str:
    """Code that countdown's scorer runs (sympy makes ``exec(...)!`` a factorial)."""
    return f"exec({code!r})!"


def _forger(secret_file: Path, marker: Path) -> str:
    """Writes a file, gathers secrets, then floods every fd it has, and every fd of its
    parent through /proc, with forged errors carrying them and forged scores."""
    return _code_answer(
        "import os, socket, glob\n"
        "found = [os.environ.get('ENVHUB_TOKEN', ''), socket.gethostname()]\n"
        f"for path in [{str(secret_file)!r}, '/etc/hostname']:\n"
        "    try:\n"
        "        found.append(open(path).read())\n"
        "    except OSError:\n"
        "        pass\n"
        "try:\n"
        f"    open({str(marker)!r}, 'w').write('x')\n"
        "except OSError:\n"
        "    pass\n"
        "secret = ' '.join(found).replace('\"', '')\n"
        'lines = (\'{"error": "raised", "type": "%s"}\\n{"error": "%s"}\\n\' '
        "% (secret, secret)).encode() + b'{\"score\": 1.0}\\n' * 8\n"
        "for fd in range(256):\n"
        "    try:\n"
        "        os.write(fd, lines)\n"
        "    except OSError:\n"
        "        pass\n"
        "for path in glob.glob('/proc/%d/fd/*' % os.getppid()):\n"
        "    try:\n"
        "        with open(path, 'wb') as channel:\n"
        "            channel.write(lines)\n"
        "    except OSError:\n"
        "        pass\n"
    )


def _entry(dataset: str) -> dict[str, Any]:
    entry: dict[str, Any] = create_dataset(dataset, seed=0, size=1)[0]
    return entry


def test_a_forged_reply_reaches_no_other_score_and_leaks_nothing(
    pool: ScorerPool, tmp_path: Path
) -> None:
    secret_file = tmp_path / "host-secret"
    secret_file.write_text("host-file-contents-7d1e")
    marker = tmp_path / "written-by-the-score"
    entry = _entry("countdown")
    official = create_dataset("countdown", seed=0, size=1).score_answer("0", entry)
    hostile = pool.score("countdown", CONFIG, entry, _forger(secret_file, marker), 20.0)
    later = [pool.score("countdown", CONFIG, entry, "0", 20.0) for _ in range(4)]
    assert hostile.score != 1.0 and [o.score for o in later] == [official] * 4, (hostile, later)
    secrets = [TOKEN, "host-file-contents-7d1e", socket.gethostname()]
    for outcome in [hostile, *later]:
        assert outcome.error is None or ERRORS.fullmatch(outcome.error), outcome.error
        assert not any(secret in str(outcome) for secret in secrets), outcome
    if pool.argv[0] == "bwrap":  # on the host, code that ran could write as the server's user
        assert not marker.exists()


def test_the_score_sees_none_of_the_servers_environment(pool: ScorerPool) -> None:
    """n_queens ``eval``-s the answer: it scores 0.5 if the board comes back, so the
    answer's value says what the scored code saw."""
    entry = _entry("n_queens")
    board = [row.split(" ") for row in entry["metadata"]["valid_answers"][0].split("\n")]
    probe = f"__import__('os').environ.get('ENVHUB_TOKEN') is None and {board!r}"
    assert pool.score("n_queens", CONFIG, entry, probe, 20.0) == Outcome(0.5)
    leak = f"__import__('os').environ.get('ENVHUB_TOKEN') is not None and {board!r}"
    assert pool.score("n_queens", CONFIG, entry, leak, 20.0) == Outcome(0.0)


def test_the_score_reads_no_servers_secrets_and_writes_no_server_file(
    pool: ScorerPool, tmp_path: Path
) -> None:
    """Code in the score looks for the token in every process's environment (a process
    started with it stands for the server) and writes into the server's directory; it
    raises if either works. n_queens ``eval``-s the answer and scores the board 0.5.
    Under bubblewrap only: on the host a score runs as the server's user (the module
    docstring of :mod:`envhub_reasoning_gym.scoring` says so)."""
    if pool.argv[0] != "bwrap":
        pytest.skip("only bubblewrap hides the server's processes and files from a score")
    entry = _entry("n_queens")
    board = [row.split(" ") for row in entry["metadata"]["valid_answers"][0].split("\n")]
    marker = tmp_path / "written-by-the-score"
    code = (
        "import glob\n"
        "for path in glob.glob('/proc/[0-9]*/environ'):\n"
        "    try:\n"
        f"        if {TOKEN.encode()!r} in open(path, 'rb').read():\n"
        "            raise SystemExit('read the token')\n"
        "    except OSError:\n"
        "        pass\n"
        "try:\n"
        f"    open({str(marker)!r}, 'w')\n"
        "except OSError:\n"
        "    pass\n"
        "else:\n"
        "    raise SystemExit('wrote a file')\n"
    )
    server = subprocess.Popen(["sleep", "120"], env={**os.environ, "ENVHUB_TOKEN": TOKEN})
    try:
        assert pool.score("n_queens", CONFIG, entry, f"exec({code!r}) or {board!r}", 20.0) == (
            Outcome(0.5)
        )
    finally:
        server.kill()
        server.wait()
    assert not marker.exists()


def test_a_scores_memory_is_bounded(pool: ScorerPool) -> None:
    """binary_matrix ``eval``-s the answer and gives 0.1 for its solution as a list: an
    answer that allocates first scores 0.1 within the allowance and 0 past it (the
    allocation fails in the score's child; the worker goes on)."""
    entry = _entry("binary_matrix")
    solution = entry["metadata"]["solution"]
    within = pool.score("binary_matrix", CONFIG, entry, f"len([0] * 10**6) and {solution}", 20.0)
    past = pool.score("binary_matrix", CONFIG, entry, f"len([0] * 10**8) and {solution}", 20.0)
    assert (within, past) == (Outcome(0.1), Outcome(0.0))
    assert pool.score("binary_matrix", CONFIG, entry, entry["answer"], 20.0) == Outcome(1.0)


def test_a_hanging_score_times_out_and_the_next_one_scores(pool: ScorerPool) -> None:
    entry = _entry("countdown")
    hung = pool.score("countdown", CONFIG, entry, _code_answer("while True: pass"), 2.0)
    assert hung.score is None and hung.error is not None and "longer than 2s" in hung.error
    assert pool.score("countdown", CONFIG, entry, entry["answer"], 20.0) == Outcome(1.0)


def test_a_score_that_stops_making_progress_is_infrastructure_not_a_zero(
    pool: ScorerPool,
) -> None:
    """A child that uses no CPU for a window of its timeout (blocked here; on a stalled
    machine, kept from running) gets no score: the pool asks once more, then raises
    :class:`SandboxError`, which masks the episode. A busy child is judged by the CPU
    it used (the test above), so load alone never turns a score into a 0."""
    entry = _entry("countdown")
    with pytest.raises(SandboxError, match="lost or stalled"):
        pool.score("countdown", CONFIG, entry, _code_answer("import time; time.sleep(30)"), 1.0)
    assert pool.score("countdown", CONFIG, entry, entry["answer"], 20.0) == Outcome(1.0)
