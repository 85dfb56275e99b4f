"""Where the test suite's CPU goes: per test, the CPU-seconds of everything its xdist
worker ran meanwhile (the worker, its servers, zygotes, Ray nodes, llama-server), from a
cgroup v1 ``cpuacct`` group per worker; and the totals per xdist scope (the root
conftest's groups, else the module). Docker containers run in dockerd's groups and are
not counted. CI is CPU-bound on its two cores (setup 97%, tests 92% busy), so CPU-seconds,
not wall time, say what a change to the suite saves.

As a pytest plugin (root, cgroup v1; CPU-s robust to other load, wall times not):

    PYTHONPATH=benchmarks .venv/bin/pytest tests environments -n auto --dist loadgroup \\
        -p suite_cpu -p no:cacheprovider
    .venv/bin/python benchmarks/suite_cpu.py [--top 40]     # the report

Rows go to ``$SUITE_CPU_OUT.<worker>.tsv`` (default ``/tmp/suite_cpu``): node id, wall s,
CPU s.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

_CPUACCT = Path("/sys/fs/cgroup/cpuacct")
_OUT = os.environ.get("SUITE_CPU_OUT", "/tmp/suite_cpu")
_group: Path | None = None
_rows: IO[str] | None = None


def _usage() -> float:
    assert _group is not None
    return int((_group / "cpuacct.usage").read_text()) / 1e9


def pytest_configure(config: pytest.Config) -> None:
    """In an xdist worker: move it into a cgroup of its own, which everything it starts
    inherits."""
    global _group, _rows
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return
    _group = _CPUACCT / f"suite_cpu_{worker}"
    _group.mkdir(exist_ok=True)
    (_group / "cgroup.procs").write_text(str(os.getpid()))
    _rows = open(f"{_OUT}.{worker}.tsv", "a", buffering=1)  # open for the session


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if _group is None or _rows is None:
        yield
        return
    cpu, wall = _usage(), time.monotonic()
    yield
    _rows.write(f"{item.nodeid}\t{time.monotonic() - wall:.2f}\t{_usage() - cpu:.2f}\n")


def report(top: int) -> None:
    """CPU-s per scope (as the root conftest hands work out) and the costliest tests."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from conftest import _scope

    rows = []
    for path in glob.glob(f"{_OUT}.*.tsv"):
        for line in Path(path).read_text().splitlines():
            nodeid, wall, cpu = line.split("\t")
            rows.append((nodeid, float(wall), float(cpu)))
    scopes: collections.Counter[str] = collections.Counter()
    for nodeid, _, cpu in rows:
        scopes[_scope(nodeid).split("::")[0]] += cpu
    print(f"{len(rows)} tests, {sum(cpu for *_, cpu in rows):.0f} CPU-s")
    for scope, cpu in scopes.most_common(top):
        print(f"{cpu:8.1f}  {scope}")
    print("\ncostliest tests (CPU-s, wall s):")
    for nodeid, wall, cpu in sorted(rows, key=lambda r: -r[2])[:top]:
        print(f"{cpu:8.1f} {wall:8.1f}  {nodeid}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=30)
    report(parser.parse_args().top)
