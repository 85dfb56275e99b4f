"""Questions over the rendered corpus: single-hop, 2- and 3-hop bridge, and comparison.

Each task carries its gold answer with aliases (alternative names, number formats), its
gold supporting passages (found through the fact keys the chunker kept on passages),
and static gold actions: one ``search`` per hop with the entity's title and the
relation's words, then ``answer``. Which entities and pairs are asked about depends on
a fixed internal seed and the real-world facts only, so task ids and splits are the same
for every corpus seed and, but for comparisons that tie there, for the counterfactual
corpus; the answers follow the (possibly altered) facts the corpus states.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from envhub import GoldCall, Task
from envhub_search.articles import fmt_int
from envhub_search.knowledge import City, Country, Element, KnowledgeBase

__all__ = ["SYSTEM_PROMPT", "FactPassages", "generate_tasks", "split_of", "task_from_parts"]

SYSTEM_PROMPT = (
    "You answer questions using a search engine over an encyclopedia. Call `search` with "
    "keywords to find relevant passages, `open` with a document id to read a whole article, "
    "and search again as often as needed: questions may need facts from several articles. "
    "The encyclopedia may differ from what you remember; trust the documents. When you know "
    "the answer, call `answer` with a short answer only (a name or a number), which ends the "
    "episode."
)

_TASK_SEED = "envhub-search-tasks-v1"
TEST_SHARE = 10  # one task in ten is in the test split

#: (doc_id, fact key) -> passage id stating that fact
FactPassages = Mapping[tuple[str, str], str]
T = TypeVar("T")
Entity = Country | City | Element


@dataclass(frozen=True)
class Hop:
    """One retrieval step: the article to find, the fact to read there, the search words."""

    doc_id: str
    fact: str
    query: str


def split_of(task_id: str) -> str:
    """A fixed split from the id alone, stable across releases and machines."""
    return "test" if zlib.crc32(task_id.encode()) % TEST_SHARE == 0 else "train"


def number_aliases(value: int) -> list[str]:
    return list(dict.fromkeys([fmt_int(value), str(value), fmt_int(value).replace(",", " ")]))


def _country_answers(c: Country) -> list[str]:
    return [c.name, *c.aliases]


def _city_answers(city: City) -> list[str]:
    return list(dict.fromkeys([city.name, city.title, *city.aliases]))


def task_from_parts(
    task_id: str, question: str, answers: list[str], searches: list[str], *,
    gold_passages: list[str], metadata: dict,
) -> Task:
    """A task whose gold actions search each query in turn, then answer."""
    calls = [GoldCall(name="search", arguments={"query": q}) for q in searches]
    calls.append(GoldCall(name="answer", arguments={"text": answers[0]}))
    return Task(
        id=task_id,
        prompt=[
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": question},
        ],
        answer=list(dict.fromkeys(answers)),
        gold_actions=calls,
        split=split_of(task_id),
        metadata={**metadata, "gold_passages": gold_passages},
    )


class _Builder:
    """Chooses entities on ``base`` (the real world) and reads answers off ``kb``.

    Choosing on the unperturbed facts keeps the questions (and their ids) the same for
    the counterfactual corpus, whose values, capitals included, differ.
    """

    def __init__(self, kb: KnowledgeBase, facts: FactPassages, base: KnowledgeBase) -> None:
        self.kb = kb
        self.base = base
        self.facts = facts
        self.rng = random.Random(_TASK_SEED)

    def real(self, doc_id: str) -> Entity:
        """The real-world version of an entity, by doc id."""
        kind, key = doc_id.split("/", 1)
        if kind == "country":
            return self.base.countries[key]
        if kind == "city":
            return self.base.cities[doc_id]
        return self.base.elements[key]

    def title(self, doc_id: str) -> str:
        kind, key = doc_id.split("/", 1)
        if kind == "country":
            return self.kb.countries[key].name
        if kind == "city":
            return self.kb.cities[doc_id].title
        return self.kb.elements[key].name

    def hop(self, doc_id: str, fact: str, words: str) -> Hop:
        return Hop(doc_id, fact, f"{self.title(doc_id)} {words}".strip())

    def task(self, kind: str, key: str, question: str, answers: list[str], hops: list[Hop],
             relation: str) -> Task | None:
        passages = [self.facts.get((h.doc_id, h.fact)) for h in hops]
        if any(p is None for p in passages) or not answers or not answers[0]:
            return None  # the fact is not stated in the corpus
        return task_from_parts(
            f"search-{kind}-{relation}-{key}", question, answers, [h.query for h in hops],
            gold_passages=list(dict.fromkeys(p for p in passages if p)),
            metadata={"type": kind, "hops": len({h.doc_id for h in hops}), "relation": relation},
        )

    def sample(self, items: list[T], count: int) -> list[T]:
        return items if len(items) <= count else self.rng.sample(items, count)

    def capital_answers(self, country: Country) -> list[str]:
        city = self.kb.cities.get(country.capital or "")
        return [country.capital_name, *(_city_answers(city) if city else [])]

    def non_capital_cities(self) -> list[City]:
        return [self.kb.cities[c.doc_id] for c in self.base.cities.values()
                if self.base.capital_of(c.doc_id) is None]

    # -- single hop ------------------------------------------------------------------------

    def single(self) -> Iterator[Task | None]:
        kb = self.kb
        for c in kb.countries.values():
            yield self.task("single", c.code, f"What is the capital of {c.name}?",
                            self.capital_answers(c),
                            [self.hop(c.doc_id, "capital", "capital")], "capital")
            if c.currencies:
                yield self.task("single", c.code, f"Which currency is used in {c.name}?",
                                [*c.currencies, *c.currency_codes],
                                [self.hop(c.doc_id, "currency", "currency")], "currency")
            if c.calling_code:
                yield self.task("single", c.code,
                                f"What is the international calling code of {c.name}?",
                                [c.calling_code, f"+{c.calling_code}"],
                                [self.hop(c.doc_id, "calling_code", "calling code")],
                                "calling_code")
            yield self.task("single", c.code, f"How many people live in {c.name}?",
                            number_aliases(c.population),
                            [self.hop(c.doc_id, "population", "population")], "population")
        cities = list(kb.cities.values())
        for city in self.sample(cities, 200):
            yield self.task("single", city.geonameid,
                            f"In which country is the city of {city.title}?",
                            _country_answers(kb.countries[city.country]),
                            [self.hop(city.doc_id, "country", "city country")], "country")
        for city in self.sample(cities, 100):
            yield self.task("single", city.geonameid, f"What is the population of {city.title}?",
                            number_aliases(city.population),
                            [self.hop(city.doc_id, "population", "population")], "population")
        for e in kb.elements.values():
            yield self.task("single", e.symbol,
                            f"Which chemical element has the symbol {e.symbol}?", [e.name],
                            [Hop(e.doc_id, "symbol", f"chemical element symbol {e.symbol}")],
                            "element_of_symbol")
            yield self.task("single", e.symbol, f"What is the atomic number of {e.name}?",
                            [str(e.number)], [self.hop(e.doc_id, "number", "atomic number")],
                            "atomic_number")
            if e.discoverers:
                who = [e.discoverers, *(p.strip() for p in e.discoverers.split(","))]
                yield self.task("single", e.symbol, f"Who discovered {e.name}?", who,
                                [self.hop(e.doc_id, "discovery", "discovered")], "discoverer")
            if e.discoverers and e.discovery_year:
                yield self.task("single", e.symbol, f"In which year was {e.name} discovered?",
                                [str(e.discovery_year)],
                                [self.hop(e.doc_id, "discovery", "discovered year")],
                                "discovery_year")

    # -- bridges ---------------------------------------------------------------------------

    def bridges(self) -> Iterator[Task | None]:
        kb = self.kb
        cities = self.non_capital_cities()
        for city in self.sample(cities, 200):
            country = kb.countries[city.country]
            yield self.task(
                "bridge", city.geonameid,
                f"What is the capital of the country in which {city.title} is located?",
                self.capital_answers(country),
                [self.hop(city.doc_id, "country", "city country"),
                 self.hop(country.doc_id, "capital", "capital")], "capital_of_country_of_city")
        for city in self.sample(cities, 120):
            country = kb.countries[city.country]
            if country.currencies:
                yield self.task(
                    "bridge", city.geonameid,
                    f"Which currency is used in the country where the city of {city.title} lies?",
                    [*country.currencies, *country.currency_codes],
                    [self.hop(city.doc_id, "country", "city country"),
                     self.hop(country.doc_id, "currency", "currency")],
                    "currency_of_country_of_city")
        with_capital = [kb.countries[c.code] for c in self.base.countries.values() if c.capital]
        for country in self.sample(with_capital, 120):
            capital = kb.cities[country.capital or ""]
            if country.calling_code:
                yield self.task(
                    "bridge", country.code,
                    f"What is the international calling code of the country whose capital is "
                    f"{capital.title}?", [country.calling_code, f"+{country.calling_code}"],
                    [self.hop(capital.doc_id, "capital_of", "capital"),
                     self.hop(country.doc_id, "calling_code", "calling code")],
                    "calling_code_of_country_of_capital")
        for e in kb.elements.values():
            country = kb.country_named(e.discovery_location)
            if e.discoverers and country is not None:
                yield self.task(
                    "bridge", e.symbol,
                    f"What is the capital of the country in which {e.name} was discovered?",
                    self.capital_answers(country),
                    [self.hop(e.doc_id, "discovery", "discovered"),
                     self.hop(country.doc_id, "capital", "capital")],
                    "capital_of_discovery_country")
        for city in self.sample(cities, 180):
            country = kb.countries[city.country]
            capital = kb.cities.get(country.capital or "")
            if capital is not None:
                yield self.task(
                    "bridge", city.geonameid,
                    f"What is the population of the capital of the country in which {city.title} "
                    "is located?", number_aliases(capital.population),
                    [self.hop(city.doc_id, "country", "city country"),
                     self.hop(country.doc_id, "capital", "capital"),
                     self.hop(capital.doc_id, "population", "population")],
                    "population_of_capital_of_country_of_city")

    # -- comparisons -----------------------------------------------------------------------

    def compare(self, relation: str, items: list[Entity], count: int,
                value: Callable[[Any], float], name: Callable[[Any], str], fact: str, question: str,
                larger: bool = True) -> Iterator[Task | None]:
        """Pairs of items; the answer is the one with the larger (or smaller) value."""
        pairs = {tuple(sorted(self.rng.sample(range(len(items)), 2))) for _ in range(count * 2)}
        for i, j in sorted(pairs)[:count]:
            a, b = items[i], items[j]
            doc_a, doc_b = a.doc_id, b.doc_id
            if value(a) == value(b) or value(self.real(doc_a)) == value(self.real(doc_b)):
                continue  # a tie has no right answer (rare; only then do the worlds differ)
            winner = max((a, b), key=value) if larger else min((a, b), key=value)
            answers = [name(winner), *(winner.aliases if isinstance(winner, Country) else [])]
            key = f"{doc_a.split('/', 1)[1]}-{doc_b.split('/', 1)[1]}"
            yield self.task("comparison", key, question.format(a=name(a), b=name(b)), answers,
                            [self.hop(doc_a, fact, fact), self.hop(doc_b, fact, fact)], relation)

    def comparisons(self) -> Iterator[Task | None]:
        kb = self.kb
        countries = list(kb.countries.values())
        yield from self.compare(
            "larger_population", countries, 120, lambda c: c.population, lambda c: c.name,
            "population", "Which country has the larger population, {a} or {b}?")
        yield from self.compare(
            "larger_area", [c for c in countries if c.area], 100, lambda c: c.area or 0,
            lambda c: c.name, "area", "Which country covers a larger area, {a} or {b}?")
        yield from self.compare(
            "larger_city", list(kb.cities.values()), 100, lambda c: c.population,
            lambda c: c.title, "population", "Which city has more inhabitants, {a} or {b}?")
        dated = [e for e in kb.elements.values() if e.discoverers and e.discovery_year]
        yield from self.compare(
            "discovered_earlier", dated, 100, lambda e: e.discovery_year or 0, lambda e: e.name,
            "discovery", "Which element was discovered earlier, {a} or {b}?", larger=False)
        yield from self.compare(
            "denser", [e for e in kb.elements.values() if e.density is not None], 60,
            lambda e: e.density or 0.0, lambda e: e.name, "density",
            "Which element has the higher density, {a} or {b}?")


def generate_tasks(
    kb: KnowledgeBase, facts: FactPassages, base: KnowledgeBase | None = None
) -> list[Task]:
    """All tasks in a fixed order.

    ``kb`` holds the facts the corpus states; ``base`` (default: ``kb``) the real-world
    facts that decide which questions exist, so a counterfactual corpus keeps the ids.
    """
    builder = _Builder(kb, facts, base or kb)
    return [t for gen in (builder.single, builder.bridges, builder.comparisons)
            for t in gen() if t is not None]
