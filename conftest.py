"""Test-run wiring shared by ``tests/`` and ``environments/*/tests``: xdist groups.

CI runs the suite on two pytest-xdist workers (``-n auto --dist loadgroup``): most tests
wait on servers, subprocesses and sockets, so two workers keep both cores busy. Tests that
own machine-wide state run on one worker, in the group their path names here:

- ``machine``: the Docker engine (image builds, garbage collection of containers and
  images, the ``envhub-images`` network) and Ray clusters (a second cluster on the same
  machine shares ``/tmp/ray`` and may be joined by ``ray.init()``);
- ``local-llm``: the real llama.cpp server (one process per worker would double its
  memory and fight for the same cores).

Work is handed out by scope (a group, else a test module), largest first as xdist does by
default, except that the scopes in ``_FIRST`` go before all others: a long CPU-bound test
handed out last runs alone at the end while the other worker idles (the learning test
added its whole seven minutes to CI that way).

Without xdist (``pytest path/to/test.py``) nothing changes.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

_ROOT = Path(__file__).parent

_GROUPS: dict[str, tuple[str, ...]] = {
    "machine": (
        "tests/fleet/",
        "tests/images/",
        "tests/sandboxes/",
        "environments/swe/tests/",
        "environments/sql/tests/test_sql_sandbox.py",
        "tests/conformance/test_conformance.py",
        "tests/core/test_cache_build.py",
        "tests/core/test_cli_options.py",
        "tests/core/test_registry.py",
        "tests/server/test_adversarial_options.py",
        "tests/trainers/test_verl.py",
    ),
    "local-llm": (
        "tests/test_local_llm.py",
        "tests/test_local_llm_tito.py",
        "tests/rollout/test_local_llm_rollout.py",
        "tests/rollout/test_local_llm_user.py",
        "tests/agents/test_local_llm_agent.py",
        "tests/judges/test_local_llm_judge.py",
        "environments/bfcl/tests/test_agreement.py",
    ),
}


_FIRST: tuple[str, ...] = ("tests/trainers/test_learning.py",)


def _relative(path: Path) -> str:
    try:
        return path.relative_to(_ROOT).as_posix()
    except ValueError:
        return path.as_posix()


def _group_of(path: Path) -> str | None:
    relative = _relative(path)
    for group, prefixes in _GROUPS.items():
        if relative.startswith(prefixes):
            return group
    return None


def _scope_of(item: pytest.Item) -> str:
    """The unit xdist's loadgroup hands to one worker: the group, else the module (or the
    class) as in ``LoadScopeScheduling._split_scope``."""
    return _group_of(item.path) or item.nodeid.rsplit("::", 1)[0]


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist"):
        config.option.loadscopereorder = False  # ordered in pytest_collection_modifyitems


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        group = _group_of(item.path)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if not hasattr(config, "workerinput"):  # not an xdist worker: the order stays as collected
        return
    sizes = Counter(_scope_of(item) for item in items)
    items.sort(
        key=lambda item: (not _relative(item.path).startswith(_FIRST), -sizes[_scope_of(item)])
    )
