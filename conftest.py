"""Test-run wiring shared by ``tests/`` and ``environments/*/tests``: xdist groups, and
the ``earlier_clients_freed`` fixture.

CI runs the suite on two pytest-xdist workers (``-n auto --dist loadgroup``): most tests
wait on servers, subprocesses and sockets, so two workers keep both cores busy. Tests that
own machine-wide state run on one worker, in the group whose prefix their node id (a file,
or a file and a test) starts with:

- ``docker``: the Docker engine (image builds, garbage collection of containers and
  images, the ``envhub-images`` network) and what shares its caches;
- ``ray``: Ray clusters (a second cluster on the same machine shares ``/tmp/ray`` and may
  be joined by ``ray.init()``); the fleet's containers are its own, which the Docker
  group's garbage collection leaves alone (it reaps only containers of dead processes);
- ``local-llm``: the real llama.cpp server (one process per worker would double its
  memory and fight for the same cores);
- ``openenv``: the OpenEnv servers the openenv plugin's tests share (each start costs
  seconds of CPU; one set per worker would double them);
- ``verifiers``: the verifiers workers of the verifiers plugin's tests (a session's, each
  seconds of imports).

Work is handed out by scope (a group, else a test module): the scopes in ``_FIRST``, then
those with a test marked ``slow``, then the rest, largest first within each (as xdist does
by default). A long test handed out last runs alone at the end while the other worker
idles (the learning test added its whole seven minutes to CI that way); a scope's test
count says little of its time, a ``slow`` mark says more.

The scopes are this file's, through xdist's ``pytest_xdist_make_scheduler`` hook, not
``xdist_group`` marks: xdist 3.8 carries a mark to the scheduler by appending it to the
node id, which pytest 9.2's structured node ids ignore (pytest-xdist#1386), so marks were
silently dropped and a group's tests ran on both workers at once.

Without xdist (``pytest path/to/test.py``) nothing changes.
"""

from __future__ import annotations

import gc
from collections import Counter
from typing import Any

import pytest

_GROUPS: dict[str, tuple[str, ...]] = {
    "docker": (
        "tests/images/",
        "tests/sandboxes/",
        "environments/swe/tests/",
        "environments/harbor/tests/",
        "environments/sql/tests/test_sql_sandbox.py",
        "tests/conformance/test_conformance.py",
        "tests/core/test_cache_build.py",
        "tests/core/test_cli_options.py",
        "tests/core/test_registry.py",
        "tests/server/test_adversarial_options.py",
    ),
    "ray": (
        "tests/fleet/",
        "tests/trainers/test_verl.py",
        "tests/docs/test_tutorials.py::test_scale_out",  # its own Ray cluster
    ),
    "local-llm": (
        "tests/test_local_llm.py",
        "tests/test_local_llm_tito.py",
        "tests/rollout/test_local_llm_rollout.py",
        "tests/rollout/test_local_llm_user.py",
        "tests/agents/test_local_llm_agent.py",
        "tests/judges/test_local_llm_judge.py",
        "environments/bfcl/tests/test_agreement.py",
        "tests/docs/test_tutorials.py::test_rollout",  # serves SmolLM2
    ),
    "openenv": ("environments/openenv/tests/",),
    "verifiers": ("environments/verifiers/tests/",),
}


_FIRST: tuple[str, ...] = ("tests/trainers/test_learning.py",)


def _scope(nodeid: str) -> str:
    """The unit handed to one worker: the group of the node id, else its module (or class),
    as ``LoadScopeScheduling._split_scope`` has it."""
    for group, prefixes in _GROUPS.items():
        if nodeid.startswith(prefixes):
            return group
    return nodeid.rsplit("::", 1)[0]


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist"):
        config.option.loadscopereorder = False  # ordered in pytest_collection_modifyitems


@pytest.hookimpl(optionalhook=True)  # xdist's hook: unknown where xdist is not installed
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadgroup``: xdist's scope scheduler over :func:`_scope`."""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    return GroupScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):  # not an xdist worker: the order stays as collected
        return
    sizes = Counter(_scope(item.nodeid) for item in items)
    slow = {_scope(item.nodeid) for item in items if item.get_closest_marker("slow")}
    items.sort(
        key=lambda item: (
            not item.nodeid.startswith(_FIRST),
            _scope(item.nodeid) not in slow,
            -sizes[_scope(item.nodeid)],
        )
    )


@pytest.fixture
def earlier_clients_freed() -> None:
    """For a test that checks what closing an environment class's last client releases
    (``aclose_shared``: workers, servers, browsers): a client an earlier test of this
    process dropped inside a reference cycle (a kept traceback's frames) counts as open
    until a garbage collection frees it (``LocalEnvironment.aclose`` forces none), and
    would keep the shared resources alive."""
    gc.collect()
