"""Counterfactual knowledge: the same entities with altered facts.

A model that memorised the real world cannot answer from memory once capitals move,
currencies are swapped and populations change; it has to read the corpus. Articles and
questions are both rendered from the perturbed knowledge base, so every answer stays
consistent with the text the agent can retrieve. Entity identities (names, codes, which
country a city lies in, atomic numbers) are kept, and so is which facts are known, so
the same questions can be asked of both worlds.
"""

from __future__ import annotations

import copy
import random
from typing import TypeVar

from envhub_search.knowledge import KnowledgeBase

__all__ = ["perturb"]

T = TypeVar("T")


def _scale(rng: random.Random, value: int) -> int:
    """A clearly different value of the same magnitude (never equal to the original)."""
    factor = rng.choice([rng.uniform(0.45, 0.85), rng.uniform(1.15, 1.9)])
    return max(1, round(value * factor))


def _permute(rng: random.Random, values: list[T]) -> list[T]:
    """A shuffle that moves every position (Sattolo's cycle), so most values change."""
    out = list(values)
    for i in range(len(out) - 1, 0, -1):
        j = rng.randrange(i)
        out[i], out[j] = out[j], out[i]
    return out


def perturb(kb: KnowledgeBase, seed: int) -> KnowledgeBase:
    """A counterfactual copy of ``kb``; the same seed always alters the same facts alike."""
    rng = random.Random(f"counterfactual:{seed}")
    out = copy.deepcopy(kb)
    countries = list(out.countries.values())
    cities_by_country: dict[str, list[str]] = {}
    for city in out.cities.values():
        cities_by_country.setdefault(city.country, []).append(city.doc_id)

    for country in countries:
        country.population = _scale(rng, country.population)
        if country.area:
            country.area = _scale(rng, country.area)
        others = [c for c in cities_by_country.get(country.code, []) if c != country.capital]
        if country.capital and others:  # the capital moves to another city of the country
            country.capital = rng.choice(others)
            country.capital_name = out.cities[country.capital].name
    with_money = [c for c in countries if c.currencies]
    moneys = _permute(rng, [(c.currencies, c.currency_codes) for c in with_money])
    for country, (names, iso) in zip(with_money, moneys, strict=True):
        country.currencies, country.currency_codes = names, iso
    with_code = [c for c in countries if c.calling_code]
    codes = _permute(rng, [c.calling_code for c in with_code])
    for country, code in zip(with_code, codes, strict=True):
        country.calling_code = code

    for city in out.cities.values():
        city.population = _scale(rng, city.population)

    elements = list(out.elements.values())
    discovered = [e for e in elements if e.discoverers]
    people = _permute(rng, [e.discoverers for e in discovered])
    for element, who in zip(discovered, people, strict=True):
        element.discoverers = who
    # places naming a known country are swapped among themselves, so questions that
    # bridge through the discovery country stay answerable
    for names_country in (True, False):
        group = [e for e in elements if e.discovery_location
                 and (out.country_named(e.discovery_location) is not None) == names_country]
        places = _permute(rng, [e.discovery_location for e in group])
        for element, place in zip(group, places, strict=True):
            element.discovery_location = place
    for element in elements:
        if element.discovery_year:
            shift = rng.choice([-1, 1]) * rng.randint(7, 60)
            element.discovery_year = min(2020, element.discovery_year + shift)
        if element.density:
            element.density = float(f"{element.density * rng.uniform(1.2, 2.5):.4g}")
    return out
