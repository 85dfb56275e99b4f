"""Pinned runs: ``envhub rollout NAME==VERSION`` and the checks behind ``--resume``.

Every trajectory and run summary records the environment's pins (:class:`EnvRef`: its
distribution, that distribution's version and the task set's hash), as the environment
reports them: a server reports its own, so a remote run is pinned to what the server
runs, not to what the client has installed.

A *pin* is a PEP 440 specifier after the environment's name (``calc==0.2.0``,
``calc>=0.2,<0.3``), checked against the distribution version the environment reports
before any episode runs (:func:`check_pin`). ``--resume`` (:func:`check_resume`) refuses
a file written from another task set, since it would mix two datasets in one file, and
lets the rest through with a :class:`PinWarning`: a file without task-set hashes (written
before envhub recorded them) or an environment that reports none cannot be checked, and
another distribution version with the same task set may be a fix to a tool or a reward,
which its records' own pins still show.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Collection
from pathlib import Path

from envhub.errors import InvalidRequest
from envhub.trajectory import EnvRef

__all__ = ["PinWarning", "check_pin", "check_resume", "split_pin"]

_PIN = re.compile(r"^(?P<name>[^=<>!~\s]+)\s*(?P<spec>[=<>!~].*)?$")


class PinWarning(UserWarning):
    """A resumed run whose pins could not be checked, or differ in a way it allows."""


def split_pin(env: str) -> tuple[str, str | None]:
    """``"calc==0.2.0"`` -> ``("calc", "==0.2.0")``; ``"calc"`` -> ``("calc", None)``."""
    match = _PIN.match(env.strip())
    if match is None:
        raise InvalidRequest(f"{env!r} is not an environment name with an optional version pin "
                             "(calc, calc==0.2.0, calc>=0.2)")
    return match["name"], match["spec"].strip() if match["spec"] else None


def check_pin(ref: EnvRef, pin: str) -> None:
    """Refuse an environment whose distribution version does not satisfy ``pin``: an
    :class:`InvalidRequest` naming what is installed (or served) and how to get the
    pinned version. Pre-releases count as versions here (``==0.3.0rc1`` pins one)."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        wanted = SpecifierSet(pin)
    except InvalidSpecifier:
        raise InvalidRequest(f"{ref.name}{pin}: {pin!r} is not a version specifier "
                             "(==0.2.0, >=0.2,<0.3)") from None
    if ref.distribution is None or ref.distribution_version is None:
        raise InvalidRequest(f"{ref.name}{pin}: {ref.name} comes from no installed "
                             "distribution (a module:Class), so it has no version to pin")
    try:
        matches = wanted.contains(Version(ref.distribution_version), prereleases=True)
    except InvalidVersion:
        matches = False
    if not matches:
        raise InvalidRequest(
            f"{ref.name}{pin} is pinned, but {ref.name} runs from {ref.distribution} "
            f"{ref.distribution_version}; install the pinned version (pip install "
            f"'{ref.distribution}{pin}', on the server with --env-url) or change the pin"
        )


def check_resume(
    path: str | Path,
    ref: EnvRef,
    hashes: Collection[str | None],
    versions: Collection[tuple[str, str]],
) -> None:
    """Check that the file ``path``, whose records hold the task-set ``hashes`` and the
    (distribution, version) pairs ``versions``, can be continued by a run with ``ref``.

    Raises :class:`InvalidRequest` naming both hashes when a record was written from a
    task set other than ``ref``'s; warns (:class:`PinWarning`) when the tasks cannot be
    compared or when another version of the distribution wrote some records."""
    written = sorted(h for h in hashes if h is not None)
    if ref.task_set_hash is not None and any(h != ref.task_set_hash for h in written):
        other = ", ".join(h for h in written if h != ref.task_set_hash)
        runs = f" ({ref.distribution} {ref.distribution_version})" if ref.distribution else ""
        raise InvalidRequest(
            f"{path} was written from task set {other}, but {ref.name}{runs} with these "
            f"options has task set {ref.task_set_hash}: resuming would mix two "
            "task sets in one file; write to a new --output, or run the version, options "
            "and data that wrote it"
        )
    if ref.task_set_hash is None and written:
        _warn(f"{ref.name} reports no task-set hash (a server's with client options, or an "
              f"older envhub), so resuming {path} does not check that its tasks are the same")
    elif None in hashes:
        _warn(f"{path} has records without a task-set hash (written before envhub recorded "
              "it): resuming does not check that their tasks are the same")
    mine = (ref.distribution, ref.distribution_version)
    others = sorted(f"{d} {v}" for d, v in versions if (d, v) != mine)
    if others and ref.distribution is not None:
        _warn(f"{path} was written by {', '.join(others)}; this run uses {ref.distribution} "
              f"{ref.distribution_version} on the same task set (tools and rewards may differ: "
              "each record keeps its own pins)")


def _warn(message: str) -> None:
    warnings.warn(message, PinWarning, stacklevel=3)
