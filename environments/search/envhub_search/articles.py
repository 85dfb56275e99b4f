"""Encyclopedia-style articles rendered from the knowledge base, and passage chunking.

Every fact becomes one sentence drawn from several templates (seeded per article, so
the prose varies between entities but not between builds). Sentences carry the keys of
the facts they state; chunking keeps those keys on the passage, which is how questions
know their gold supporting passages. Python's ``pydoc_data`` topics are real prose added
as distractors.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from envhub_search.knowledge import City, Country, Element, KnowledgeBase

__all__ = [
    "PASSAGE_WORDS",
    "Document",
    "Passage",
    "Sentence",
    "chunk",
    "fmt_decimal",
    "fmt_int",
    "prose_documents",
    "render_documents",
    "sentences",
]

#: target passage length in words (Search-R1's wiki-18 uses 100-word passages)
PASSAGE_WORDS = 100


@dataclass(frozen=True)
class Sentence:
    text: str
    facts: tuple[str, ...] = ()


@dataclass
class Document:
    doc_id: str
    title: str
    sentences: list[Sentence] = field(default_factory=list)

    @property
    def text(self) -> str:
        return " ".join(s.text for s in self.sentences)


@dataclass(frozen=True)
class Passage:
    pid: str  # "<doc_id>#<n>"
    doc_id: str
    title: str
    text: str
    facts: frozenset[str] = frozenset()


def fmt_int(value: int) -> str:
    return f"{value:,}"


def fmt_decimal(value: float) -> str:
    """A float without exponent notation: 8.2e-05 -> "0.000082"."""
    return f"{value:.10f}".rstrip("0").rstrip(".")


def _pick(rng: random.Random, templates: list[str], **values: object) -> str:
    return rng.choice(templates).format(**values)


def _join(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _country(c: Country, kb: KnowledgeBase, rng: random.Random) -> Document:
    n = c.name
    out = [Sentence(_pick(rng, [
        "{n} is a country in {sub}, part of the wider region of {reg}.",
        "{n} is a sovereign state located in {sub} ({reg}).",
        "Situated in {sub}, {n} is one of the countries of {reg}.",
    ], n=n, sub=c.subregion or c.region, reg=c.region), ("subregion", "region"))]
    if c.official_name and c.official_name != n:
        out.append(Sentence(f"Its official name is the {c.official_name}.", ("official_name",)))
    rest = [Sentence(_pick(rng, [
        "The capital of {n} is {cap}.",
        "{cap} serves as the capital of {n}.",
        "{n} has its seat of government in the capital, {cap}.",
    ], n=n, cap=c.capital_name), ("capital",))]
    rest.append(Sentence(_pick(rng, [
        "{n} has a population of {p} people.",
        "About {p} people live in {n}, according to the latest census figures.",
        "The population of {n} was recorded as {p} inhabitants.",
    ], n=n, p=fmt_int(c.population)), ("population",)))
    if c.area:
        rest.append(Sentence(_pick(rng, [
            "{n} covers a total area of {a} square kilometres.",
            "The area of {n} is {a} km2.",
            "{n} spans {a} square kilometres of land and inland water.",
        ], n=n, a=fmt_int(c.area)), ("area",)))
    if c.currencies:
        pairs = zip(c.currencies, c.currency_codes, strict=True)
        money = _join([f"the {name} ({code})" for name, code in pairs])
        rest.append(Sentence(_pick(rng, [
            "The currency of {n} is {m}.",
            "In {n}, payments are made in {m}.",
            "{n} uses {m} as its official currency.",
        ], n=n, m=money), ("currency",)))
    if c.languages:
        rest.append(Sentence(_pick(rng, [
            "Languages spoken in {n} include {l}.",
            "The official languages of {n} are {l}.",
        ], n=n, l=_join(c.languages)), ("languages",)))
    if c.calling_code:
        rest.append(Sentence(_pick(rng, [
            "The international calling code of {n} is +{cc}.",
            "Telephone numbers in {n} are dialled from abroad with the country calling code +{cc}.",
        ], n=n, cc=c.calling_code), ("calling_code",)))
    if c.demonym:
        rest.append(Sentence(f"People from {n} are called {c.demonym}.", ("demonym",)))
    if c.tld:
        rest.append(Sentence(f"Internet domains of {n} end in {c.tld}.", ("tld",)))
    if c.borders:
        names = _join([kb.countries[b].name for b in c.borders])
        rest.append(Sentence(_pick(rng, [
            "{n} shares land borders with {b}.", "The neighbours of {n} are {b}.",
        ], n=n, b=names), ("borders",)))
    else:
        rest.append(Sentence(f"{n} has no land border with another country.", ("borders",)))
    rng.shuffle(rest)
    return Document(c.doc_id, n, out + rest)


def _city(city: City, kb: KnowledgeBase, rng: random.Random) -> Document:
    n = city.name
    country = kb.countries[city.country]
    out = [Sentence(_pick(rng, [
        "{n} is a city in {c}.", "{n} is a major urban centre of {c}.",
        "Located in {c}, {n} is one of the country's cities.",
    ], n=n, c=country.name), ("country",))]
    capital_of = kb.capital_of(city.doc_id)
    if capital_of is not None:
        out.append(Sentence(_pick(rng, [
            "{n} is the capital of {c}.", "It is the capital city of {c}.",
        ], n=n, c=capital_of.name), ("capital_of",)))
    if city.aliases:
        out.append(Sentence(f"{n} is also known as {_join(city.aliases)}.", ("aliases",)))
    rest = [
        Sentence(_pick(rng, [
            "{n} has a population of {p}.", "The city of {n} is home to {p} residents.",
            "Around {p} people live in {n}.",
        ], n=n, p=fmt_int(city.population)), ("population",)),
        Sentence(_pick(rng, [
            "{n} lies in the {tz} time zone.", "Local time in {n} follows the {tz} time zone.",
        ], n=n, tz=city.timezone), ("timezone",)),
        Sentence(
            f"Its coordinates are {abs(city.latitude)}°{'N' if city.latitude >= 0 else 'S'}, "
            f"{abs(city.longitude)}°{'E' if city.longitude >= 0 else 'W'}.", ("coordinates",)
        ),
    ]
    rng.shuffle(rest)
    return Document(city.doc_id, city.title, out + rest)


def _element(e: Element, rng: random.Random) -> Document:
    n = e.name
    out = [Sentence(_pick(rng, [
        "{n} is a chemical element with the symbol {s} and atomic number {z}.",
        "{n} (symbol {s}) is the chemical element with atomic number {z}.",
    ], n=n, s=e.symbol, z=e.number), ("symbol", "number"))]
    rest = [Sentence(_pick(rng, [
        "Its standard atomic weight is {w}.", "{n} has an atomic weight of {w}.",
    ], n=n, w=e.weight), ("weight",))]
    group = f"group {e.group} and " if e.group else ""
    rest.append(Sentence(
        f"{n} sits in {group}period {e.period} of the periodic table, in the {e.block}-block"
        + (f", and belongs to the {e.series.lower()}." if e.series else "."), ("position",)
    ))
    if e.discoverers is None:
        rest.append(Sentence(f"{n} has been known since ancient times.", ("discovery",)))
    else:
        where = f" in {e.discovery_location}" if e.discovery_location else ""
        when = f" in {e.discovery_year}" if e.discovery_year else ""
        rest.append(Sentence(_pick(rng, [
            "{n} was discovered by {who}{where}{when}.",
            "The discovery of {n} is credited to {who}{where}{when}.",
        ], n=n, who=e.discoverers, where=where, when=when), ("discovery",)))
    if e.density is not None:
        rest.append(Sentence(_pick(rng, [
            "The density of {n} is {d} g/cm3.",
            "{n} has a density of {d} grams per cubic centimetre.",
        ], n=n, d=fmt_decimal(e.density)), ("density",)))
    if e.name_origin:
        rest.append(Sentence(f"Name origin: {e.name_origin.strip()}", ("origin",)))
    rng.shuffle(rest)
    prose = [Sentence(s) for s in sentences(f"{e.description or ''} {e.uses or ''}")]
    return Document(e.doc_id, n, out + rest + prose)


def render_documents(kb: KnowledgeBase, seed: int) -> list[Document]:
    """One article per country, city and element, in a fixed order."""
    docs: list[Document] = []
    for country in kb.countries.values():
        docs.append(_country(country, kb, random.Random(f"{seed}:{country.doc_id}")))
    for city in kb.cities.values():
        docs.append(_city(city, kb, random.Random(f"{seed}:{city.doc_id}")))
    for element in kb.elements.values():
        docs.append(_element(element, random.Random(f"{seed}:{element.doc_id}")))
    return docs


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def sentences(text: str) -> list[str]:
    return [s for s in (part.strip() for part in _SENTENCE_END.split(text)) if s]


def prose_documents() -> list[Document]:
    """Real prose distractors: the topics of Python's language reference (``pydoc_data``)."""
    from pydoc_data.topics import topics

    docs = []
    for name in sorted(topics):
        text = " ".join(topics[name].split())
        docs.append(Document(f"python/{name}", f"Python reference: {name}",
                             [Sentence(s) for s in sentences(text)]))
    return docs


def _word_windows(sentence: Sentence, size: int) -> Iterator[Sentence]:
    words = sentence.text.split()
    for start in range(0, len(words), size):
        yield Sentence(" ".join(words[start:start + size]), sentence.facts)


def chunk(doc: Document, words: int = PASSAGE_WORDS) -> list[Passage]:
    """~``words``-word passages of whole sentences (over-long sentences are split).

    A short remainder (under a quarter of ``words``) joins the previous passage rather
    than standing alone, so no passage is a stray sentence without context.
    """
    groups: list[list[Sentence]] = [[]]
    count = 0
    for sentence in doc.sentences:
        for piece in _word_windows(sentence, words):
            size = len(piece.text.split())
            if groups[-1] and count + size > words:
                groups.append([])
                count = 0
            groups[-1].append(piece)
            count += size
    if len(groups) > 1 and count < words // 4:
        groups[-2].extend(groups.pop())
    return [
        Passage(
            pid=f"{doc.doc_id}#{index}", doc_id=doc.doc_id, title=doc.title,
            text=" ".join(s.text for s in group),
            facts=frozenset(f for s in group for f in s.facts),
        )
        for index, group in enumerate(groups) if group
    ]
