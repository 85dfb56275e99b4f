"""The MiniShop catalog: seeded products and a BM25 search over them.

Every product is a function of ``(seed, index)``, so ASINs, titles, prices and options
are identical on every machine; tasks and gold actions can therefore name them.
"""

from __future__ import annotations

import heapq
import math
import random
import re
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["CATEGORIES", "Catalog", "Product", "load_catalog", "tokens"]

_TOKEN = re.compile(r"[a-z0-9]+")
_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def tokens(text: str) -> list[str]:
    """Lower-case alphanumeric tokens: the search engine's and the reward's unit."""
    return _TOKEN.findall(text.lower())


@dataclass(frozen=True)
class CategorySpec:
    path: str
    types: tuple[str, ...]
    attributes: tuple[str, ...]
    options: dict[str, tuple[str, ...]]
    price: tuple[float, float]


CATEGORIES: tuple[CategorySpec, ...] = (
    CategorySpec(
        "clothing > men > shirts",
        ("t-shirt", "polo shirt", "dress shirt", "hoodie", "flannel shirt"),
        (
            "cotton",
            "machine washable",
            "slim fit",
            "long sleeve",
            "short sleeve",
            "moisture wicking",
            "wrinkle free",
            "relaxed fit",
        ),
        {
            "size": ("small", "medium", "large", "x-large", "xx-large"),
            "color": ("black", "white", "navy", "grey", "red", "olive"),
        },
        (9.0, 80.0),
    ),
    CategorySpec(
        "clothing > women > dresses",
        ("maxi dress", "wrap dress", "sundress", "cocktail dress"),
        (
            "floral print",
            "v neck",
            "pockets",
            "sleeveless",
            "machine washable",
            "stretch fabric",
            "midi length",
        ),
        {
            "size": ("x-small", "small", "medium", "large", "x-large"),
            "color": ("black", "blue", "pink", "green", "yellow", "burgundy"),
        },
        (15.0, 120.0),
    ),
    CategorySpec(
        "beauty > skin care > face",
        ("face moisturizer", "night cream", "vitamin c serum", "sunscreen lotion", "cleansing gel"),
        (
            "fragrance free",
            "paraben free",
            "cruelty free",
            "for sensitive skin",
            "vegan",
            "hyaluronic acid",
            "oil free",
        ),
        {"size": ("1 fl oz", "1.7 fl oz", "3.4 fl oz", "6.8 fl oz")},
        (6.0, 90.0),
    ),
    CategorySpec(
        "grocery > snacks",
        ("protein bar", "trail mix", "granola", "dark chocolate", "beef jerky", "rice cakes"),
        (
            "gluten free",
            "low sugar",
            "non gmo",
            "keto friendly",
            "high protein",
            "organic",
            "dairy free",
        ),
        {
            "flavor": ("peanut butter", "sea salt", "honey", "cinnamon", "berry", "original"),
            "pack": ("6 count", "12 count", "24 count"),
        },
        (4.0, 60.0),
    ),
    CategorySpec(
        "home > kitchen",
        ("coffee mug", "water bottle", "frying pan", "cutting board", "food storage set"),
        (
            "dishwasher safe",
            "bpa free",
            "non stick",
            "stainless steel",
            "leak proof",
            "bamboo",
            "microwave safe",
        ),
        {
            "color": ("black", "white", "blue", "green", "silver", "red"),
            "capacity": ("12 oz", "20 oz", "32 oz", "40 oz"),
        },
        (7.0, 110.0),
    ),
    CategorySpec(
        "electronics > accessories",
        ("usb c cable", "phone case", "wireless charger", "bluetooth earbuds", "power bank"),
        (
            "fast charging",
            "water resistant",
            "noise cancelling",
            "braided",
            "shockproof",
            "magnetic",
            "compact",
        ),
        {
            "color": ("black", "white", "blue", "rose gold", "purple"),
            "length": ("3 ft", "6 ft", "10 ft"),
        },
        (8.0, 150.0),
    ),
    CategorySpec(
        "shoes > athletic",
        ("running shoes", "hiking boots", "walking sneakers", "trail runners", "slip on shoes"),
        (
            "non slip",
            "breathable",
            "lightweight",
            "arch support",
            "waterproof",
            "memory foam",
            "wide width",
        ),
        {
            "size": ("7", "8", "9", "10", "11", "12"),
            "color": ("black", "white", "grey", "navy", "orange"),
        },
        (25.0, 180.0),
    ),
    CategorySpec(
        "home > bedding",
        ("sheet set", "duvet cover", "throw blanket", "pillow", "mattress topper"),
        (
            "hypoallergenic",
            "machine washable",
            "cooling",
            "deep pocket",
            "microfiber",
            "organic cotton",
            "queen size",
        ),
        {
            "size": ("twin", "full", "queen", "king"),
            "color": ("white", "grey", "beige", "navy", "sage"),
        },
        (18.0, 160.0),
    ),
)

BRANDS = (
    "Acorn",
    "Bluebird",
    "Cedar & Co",
    "Dune",
    "Ember",
    "Fjord",
    "Granite",
    "Harbor",
    "Iris",
    "Juniper",
    "Kestrel",
    "Lumen",
    "Maple",
    "Nimbus",
    "Orchard",
    "Pebble",
    "Quartz",
    "Ridge",
    "Sable",
    "Tundra",
    "Umber",
    "Vale",
    "Willow",
    "Yarrow",
    "Zephyr",
)


@dataclass(frozen=True)
class Product:
    """One catalog entry, shaped like a WebShop product."""

    asin: str
    title: str
    category: str
    product_type: str
    brand: str
    attributes: tuple[str, ...]
    features: tuple[str, ...]
    description: str
    options: dict[str, tuple[str, ...]]
    price: float
    rating: float


def _product(rng: random.Random, asin: str) -> Product:
    spec = rng.choice(CATEGORIES)
    product_type = rng.choice(spec.types)
    brand = rng.choice(BRANDS)
    attributes = tuple(rng.sample(spec.attributes, rng.randint(2, 4)))
    shown = [a for a in attributes if rng.random() < 0.5]
    title = " ".join([brand, *shown, product_type]).replace("  ", " ")
    options = {
        name: tuple(v for v in values if rng.random() < 0.7) or (values[0],)
        for name, values in spec.options.items()
    }
    features = tuple(f"{a.capitalize()}: made to last, tested by our team." for a in attributes)
    description = (
        f"The {brand} {product_type} is part of our {spec.path.split(' > ')[-1]} range. "
        f"It is {', '.join(attributes)}."
    )
    price = round(rng.uniform(*spec.price), 2)
    return Product(
        asin=asin,
        title=title.title(),
        category=spec.path,
        product_type=product_type,
        brand=brand,
        attributes=attributes,
        features=features,
        description=description,
        options=options,
        price=price,
        rating=round(rng.uniform(2.5, 5.0), 1),
    )


class Catalog:
    """The seeded product list with an inverted index for BM25 search."""

    PAGE_SIZE = 10

    def __init__(self, seed: int = 0, size: int = 3000) -> None:
        rng = random.Random(f"minishop:{seed}")
        self.seed, self.size = seed, size
        self.products: list[Product] = []
        self.by_asin: dict[str, Product] = {}
        while len(self.products) < size:
            asin = "B0" + "".join(rng.choices(_ALNUM, k=8))
            if asin in self.by_asin:
                continue
            product = _product(rng, asin)
            self.products.append(product)
            self.by_asin[asin] = product
        # BM25 term weights are fixed by the catalog, so each posting stores its final
        # weight and a search only adds numbers up.
        counts = [Counter(tokens(self._document(p))) for p in self.products]
        lengths = [sum(c.values()) for c in counts]
        avg_len = sum(lengths) / max(len(lengths), 1)
        raw: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for doc, doc_counts in enumerate(counts):
            for term, tf in doc_counts.items():
                raw[term].append((doc, tf))
        k1, b, n = 1.2, 0.75, len(self.products)
        self._postings: dict[str, list[tuple[int, float]]] = {}
        for term, postings in raw.items():
            idf = math.log(1 + (n - len(postings) + 0.5) / (len(postings) + 0.5))
            self._postings[term] = [
                (doc, idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[doc] / avg_len)))
                for doc, tf in postings
            ]

    @staticmethod
    def _document(product: Product) -> str:
        return " ".join([product.title, product.category, *product.attributes])

    def _scores(self, query: str) -> dict[int, float]:
        """BM25 score per matching product. Terms are summed in sorted order, so scores
        and the insertion order that breaks ties are the same in every process."""
        scores: dict[int, float] = {}
        for term in sorted(set(tokens(query))):
            for doc, weight in self._postings.get(term, ()):
                scores[doc] = scores.get(doc, 0.0) + weight
        return scores

    def search(self, query: str) -> list[Product]:
        """All products matching any query token, best BM25 score first."""
        scores = self._scores(query)
        return [self.products[d] for d in sorted(scores, key=scores.__getitem__, reverse=True)]

    def page(self, query: str, page: int) -> tuple[list[Product], int]:
        """One page of results (1-based) and the total number of results."""
        scores = self._scores(query)
        end = page * self.PAGE_SIZE
        top = heapq.nlargest(end, scores, key=scores.__getitem__)
        return [self.products[d] for d in top[end - self.PAGE_SIZE :]], len(scores)


_BUILD_LOCK = threading.Lock()


def load_catalog(seed: int = 0, size: int = 3000) -> Catalog:
    """One catalog per (seed, size) and process, built by the first caller while
    concurrent ones wait (~0.3 s of CPU). It lives in memory only: rebuilding it in another
    process is as fast as loading a saved copy would be."""
    with _BUILD_LOCK:
        return _build_catalog(seed, size)


@lru_cache(maxsize=4)
def _build_catalog(seed: int, size: int) -> Catalog:
    return Catalog(seed, size)
