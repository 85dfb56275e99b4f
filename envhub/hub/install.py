"""``envhub install``: a plugin from an index into this environment, changes shown first.

pip does the installing, into the interpreter envhub runs on (``sys.executable -m pip``),
from the index envhub read the plugin's card from (``--index-url``; pip's configured
extra indexes still apply). Before anything changes:

- the card is read from the index (:meth:`PackageIndex.card`), and a plugin whose declared
  envhub-rl range excludes the running core is refused;
- ``pip install --dry-run --report`` says what pip would do, and :class:`InstallPlan`
  sorts it: the plugin itself, packages new to this environment (its new dependencies),
  and packages already installed that pip would upgrade or downgrade. Only the last
  kind touches what the user has, so only it needs their yes (``--yes``, or a prompt).

The version installed is the card's (``NAME==VERSION``), so what is installed is what
was described.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envhub.errors import InvalidRequest, PackageIndexError
from envhub.hub.card import Card
from envhub.hub.index import PackageIndex, plugin_project, redact
from envhub.registry import CORE_DISTRIBUTION

__all__ = ["Change", "InstallPlan", "parse_requirement", "plan_install", "run_install"]


def parse_requirement(text: str) -> tuple[str, str | None]:
    """``NAME`` or ``NAME==VERSION`` as (plugin project, version or ``None``)."""
    try:
        req = Requirement(text)
    except InvalidRequirement:
        raise InvalidRequest(f"{text!r} is not NAME or NAME==VERSION") from None
    pins = list(req.specifier)
    if req.extras or req.url or req.marker or len(pins) > 1 or (pins and pins[0].operator != "=="):
        raise InvalidRequest(f"{text!r}: give NAME or NAME==VERSION")
    return plugin_project(req.name), pins[0].version if pins else None


@dataclass(frozen=True)
class Change:
    """One distribution pip would install: ``old`` is the version installed now."""

    name: str
    new: str
    old: str | None

    @property
    def kind(self) -> str:
        if self.old is None:
            return "install"
        try:
            old, new = Version(self.old), Version(self.new)
        except InvalidVersion:
            return "replace"
        return "upgrade" if new > old else "downgrade" if new < old else "reinstall"


@dataclass(frozen=True)
class InstallPlan:
    """What ``envhub install`` would do: the card, and pip's changes."""

    card: Card
    index_url: str
    changes: list[Change]

    @property
    def requirement(self) -> str:
        return f"{self.card.distribution}=={self.card.version}"

    @property
    def touches_installed(self) -> list[Change]:
        """The changes to packages already installed other than the plugin: what the
        user must agree to."""
        plugin = canonicalize_name(self.card.distribution)
        return [c for c in self.changes if c.old and canonicalize_name(c.name) != plugin]


def _installed_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _compatible(card: Card) -> None:
    """Refuse a plugin whose declared envhub-rl range excludes the running core."""
    try:
        wanted = SpecifierSet(card.requires_envhub)
    except InvalidSpecifier:
        raise InvalidRequest(
            f"{card.distribution} {card.version}: its envhub-rl range "
            f"{card.requires_envhub!r} is not a version specifier"
        ) from None
    running = _installed_version(CORE_DISTRIBUTION) or "0"
    if not wanted.contains(running, prereleases=True):
        raise InvalidRequest(
            f"{card.distribution} {card.version} needs {CORE_DISTRIBUTION}{wanted}; this "
            f"environment runs {CORE_DISTRIBUTION} {running} (pick another version with "
            f"NAME==VERSION, or upgrade {CORE_DISTRIBUTION})"
        )


def _pip(index_url: str, requirement: str, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check",
               "--index-url", index_url, *extra, requirement]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True)


def _pip_failed(proc: subprocess.CompletedProcess[str], what: str) -> PackageIndexError:
    lines = [line.strip() for line in proc.stderr.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")] or lines[-1:]
    return PackageIndexError(f"{what} failed: {' '.join(errors[:2]) or f'exit {proc.returncode}'}")


def plan_install(name: str, plugin_version: str | None, index_url: str) -> InstallPlan:
    """Read the card, check the envhub-rl range, and ask pip what it would change."""
    with PackageIndex(index_url) as index:
        card, _ = index.card(name, plugin_version)
    _compatible(card)
    with tempfile.TemporaryDirectory(prefix="envhub-install-") as folder:
        report_file = Path(folder) / "report.json"
        requirement = f"{card.distribution}=={card.version}"
        proc = _pip(index_url, requirement, "--dry-run", "--quiet", "--report", str(report_file))
        if proc.returncode != 0:
            raise _pip_failed(proc, f"pip install --dry-run {requirement} from {redact(index_url)}")
        report = json.loads(report_file.read_text())
    names = [(str(i["metadata"]["name"]), str(i["metadata"]["version"])) for i in report["install"]]
    changes = [Change(name, new, _installed_version(name)) for name, new in names]
    return InstallPlan(card, index_url, changes)


def run_install(plan: InstallPlan) -> None:
    """Install what ``plan`` describes (:class:`PackageIndexError` when pip fails)."""
    proc = _pip(plan.index_url, plan.requirement, "--quiet")
    if proc.returncode != 0:
        raise _pip_failed(proc, f"pip install {plan.requirement}")
