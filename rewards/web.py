"""WebShop's purchase reward (Yao et al. 2022), as pure functions with no heavy imports.

At "Buy Now" WebShop scores the bought product against the instruction's goal::

    r = r_type * (attributes matched + options matched + [price <= cap])
               / (|goal attributes| + |goal options| + 1)

An attribute matches when a product attribute has a fuzzy token-set ratio above 85, or
the goal attribute occurs in the title, features or description; an option matches
when a chosen option has a token-set ratio above 85. ``r_type`` (1, 0.5, 0.1 or 0)
guards against buying the wrong kind of product: WebShop compares the noun tokens of
the titles with spaCy; we compare content tokens (stop words removed), which needs no
language model. The token-set ratio is thefuzz's (Indel similarity on sorted token
sets), reimplemented here so this module stays dependency-free.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "FUZZY_THRESHOLD",
    "PurchaseScore",
    "ShopGoal",
    "ShopPurchase",
    "attribute_matches",
    "option_matches",
    "token_set_ratio",
    "type_factor",
    "webshop_reward",
]

FUZZY_THRESHOLD = 85.0
_TOKEN = re.compile(r"[a-z0-9]+")
_STOP_WORDS = frozenset(
    "a an and are as at be by for from in is it of on or the to with without pack count "
    "set size color colour oz fl inch ft".split()
)


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def _indel_ratio(a: str, b: str) -> float:
    """``100 * 2 * LCS(a, b) / (len(a) + len(b))``: rapidfuzz's ``fuzz.ratio``."""
    if not a and not b:
        return 100.0
    if not a or not b:
        return 0.0
    previous = [0] * (len(b) + 1)
    for char_a in a:
        current = [0]
        for j, char_b in enumerate(b, start=1):
            current.append(
                previous[j - 1] + 1 if char_a == char_b else max(previous[j], current[j - 1])
            )
        previous = current
    return 200.0 * previous[-1] / (len(a) + len(b))


def token_set_ratio(a: str, b: str) -> float:
    """Fuzzy similarity in [0, 100] that ignores word order and repeated words.

    Same definition as ``rapidfuzz.fuzz.token_set_ratio``: 100 when one token set
    contains the other, else the best ratio among intersection/remainder strings.
    """
    set_a, set_b = set(_tokens(a)), set(_tokens(b))
    if not set_a or not set_b:
        return 0.0
    common = set_a & set_b
    only_a, only_b = set_a - set_b, set_b - set_a
    if common and (not only_a or not only_b):
        return 100.0
    sect = " ".join(sorted(common))
    rest_a = " ".join(sorted(only_a))
    rest_b = " ".join(sorted(only_b))
    joined_a = f"{sect} {rest_a}".strip()
    joined_b = f"{sect} {rest_b}".strip()
    scores = [_indel_ratio(joined_a, joined_b)]
    if sect:
        scores += [_indel_ratio(sect, joined_a), _indel_ratio(sect, joined_b)]
    return max(scores)


@dataclass(frozen=True)
class ShopGoal:
    """What the instruction asks for (WebShop's ``goal``)."""

    name: str  # the product type, e.g. "slim fit polo shirt"
    category: str  # "clothing > men > shirts"
    attributes: Sequence[str]
    options: Mapping[str, str]  # option name -> wanted value
    price_upper: float  # 0 or less: no price constraint
    query: str = ""


@dataclass(frozen=True)
class ShopPurchase:
    """What was bought: the product's data, the chosen options and the price paid."""

    title: str
    category: str
    attributes: Sequence[str]
    options: Mapping[str, str]
    price: float
    features: Sequence[str] = ()
    description: str = ""
    query: str = ""


@dataclass(frozen=True)
class PurchaseScore:
    """The reward and every part of it, for the trajectory's reward components."""

    value: float
    r_type: float
    attributes_matched: int
    options_matched: int
    price_ok: bool
    title_score: float
    components: dict[str, float] = field(default_factory=dict)


def attribute_matches(goal_attributes: Iterable[str], purchase: ShopPurchase) -> int:
    """How many goal attributes the product has (fuzzy, then substring of its texts)."""
    texts = " ".join([purchase.title, *purchase.features, purchase.description]).lower()
    matched = 0
    for wanted in goal_attributes:
        if any(token_set_ratio(have, wanted) > FUZZY_THRESHOLD for have in purchase.attributes):
            matched += 1
        elif wanted.lower() in texts:
            matched += 1
    return matched


def option_matches(goal_options: Iterable[str], chosen_options: Iterable[str]) -> int:
    """How many goal option values were chosen (each goal value counts at most once)."""
    chosen = list(chosen_options)
    return sum(
        any(token_set_ratio(have, wanted) > FUZZY_THRESHOLD for have in chosen)
        for wanted in goal_options
    )


def _category_levels(category: str) -> set[str]:
    """``"Beauty › Hair Care > Shampoo"`` -> ``{"beauty", "hair care", "shampoo"}``."""
    return {part.strip().lower() for part in re.split(r"[›>]", category) if part.strip()}


def type_factor(goal: ShopGoal, purchase: ShopPurchase) -> tuple[float, float]:
    """WebShop's ``r_type`` and the title score it is based on.

    1.0 if the query or at least two category levels match or more than 20% of the
    goal's type words are in the title; 0.5 otherwise; 0.1 below 10% title overlap;
    0.0 with no overlap at all.
    """
    wanted = {t for t in _tokens(goal.name) if t not in _STOP_WORDS}
    have = {t for t in _tokens(purchase.title) if t not in _STOP_WORDS}
    title_score = len(wanted & have) / len(wanted) if wanted else 0.2
    query_match = bool(goal.query) and goal.query == purchase.query
    category_match = len(_category_levels(goal.category) & _category_levels(purchase.category)) >= 2
    r_type = 1.0 if (query_match or category_match or title_score > 0.2) else 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type, title_score


def webshop_reward(goal: ShopGoal, purchase: ShopPurchase | None) -> PurchaseScore:
    """Score a purchase against the goal; no purchase scores 0."""
    n_attrs, n_opts = len(goal.attributes), len(goal.options)
    if purchase is None:
        return PurchaseScore(
            0.0,
            0.0,
            0,
            0,
            False,
            0.0,
            {
                "purchased": 0.0,
                "r_type": 0.0,
                "r_attribute": 0.0,
                "r_option": 0.0,
                "r_price": 0.0,
                "success": 0.0,
            },
        )
    r_type, title_score = type_factor(goal, purchase)
    attrs = attribute_matches(goal.attributes, purchase)
    opts = option_matches(goal.options.values(), purchase.options.values())
    price_ok = goal.price_upper <= 0 or purchase.price <= goal.price_upper + 1e-9
    value = r_type * (attrs + opts + int(price_ok)) / (n_attrs + n_opts + 1)
    components = {
        "purchased": 1.0,
        "r_type": r_type,
        "r_attribute": attrs / n_attrs if n_attrs else 1.0,
        "r_option": opts / n_opts if n_opts else 1.0,
        "r_price": float(price_ok),
        "success": float(value >= 1.0 - 1e-9),
    }
    return PurchaseScore(value, r_type, attrs, opts, price_ok, title_score, components)
