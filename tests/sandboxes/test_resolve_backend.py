"""One rule picks the sandbox backend of every environment: its ``sandbox`` option, else
``ENVHUB_SANDBOX`` (set by the operator, never by envhub), else the environment's default."""

from __future__ import annotations

import pytest
from envhub_sql import SqlEnv
from envhub_swe import SweEnv

from envhub.errors import InvalidRequest
from envhub.sandboxes import backend_names, resolve_backend


def test_option_beats_the_environment_variable_beats_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ENVHUB_SANDBOX", raising=False)
    assert resolve_backend() == "local"
    assert resolve_backend(None, default="docker") == "docker"
    assert resolve_backend(None, default=None) is None
    assert resolve_backend("bwrap", default=None) == "bwrap"
    monkeypatch.setenv("ENVHUB_SANDBOX", " Docker ")
    assert resolve_backend(None, default=None) == "docker"
    assert resolve_backend(None) == "docker"
    assert resolve_backend("local", default="docker") == "local"


def test_unknown_names_are_refused_wherever_they_come_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ENVHUB_SANDBOX", raising=False)
    with pytest.raises(InvalidRequest, match="unknown sandbox backend 'vm'; choose one of"):
        resolve_backend("vm")
    monkeypatch.setenv("ENVHUB_SANDBOX", "vm")
    with pytest.raises(InvalidRequest, match="'vm'"):
        resolve_backend(None, default=None)
    assert backend_names() == ["bwrap", "docker", "local"]


@pytest.mark.parametrize("variable", [None, "bwrap"])
def test_sql_and_swe_follow_the_same_rule(
    variable: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each keeps its own default (SQL: in-process query workers, SWE: docker) and
    nothing else differs."""
    if variable is None:
        monkeypatch.delenv("ENVHUB_SANDBOX", raising=False)
    else:
        monkeypatch.setenv("ENVHUB_SANDBOX", variable)
    assert SqlEnv().sandbox == (variable or None)
    assert SweEnv().backend == (variable or "docker")
    assert SqlEnv(sandbox="docker").sandbox == SweEnv(sandbox="docker").backend == "docker"
    for env_class in (SqlEnv, SweEnv):
        with pytest.raises(InvalidRequest, match="unknown sandbox backend"):
            env_class(sandbox="vm")
