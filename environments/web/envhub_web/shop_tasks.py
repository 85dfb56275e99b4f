"""WebShop-style instructions sampled from the catalog, each with gold actions.

Task ``i`` is a function of ``(seed, i)`` and the catalog alone: a target product,
a subset of its attributes, one wanted value per option, and a price cap above its
price. The gold search query is checked against the real search engine so the target
is on the first results page; gold actions name elements by their stable bids.
"""

from __future__ import annotations

import math
import random

from envhub import GoldCall, Task
from envhub_web.catalog import Catalog, Product

__all__ = ["SHOP_SYSTEM_PROMPT", "generate_shop_tasks", "goal_of", "shop_split_counts"]

SHOP_SYSTEM_PROMPT = (
    "You are shopping on MiniShop, a web store at http://127.0.0.1. Each observation is the "
    'page as text: one line per control, written [bid] role "name", and the page\'s text. '
    "Use the tools with a control's bid: fill the search box and click Search, open a "
    "product, choose its options with select_option, and click Buy Now. Buy exactly one "
    "product that matches the instruction, then call finish with its ASIN."
)


def _instruction(
    product: Product, attributes: list[str], options: dict[str, str], cap: float
) -> str:
    wanted = " and ".join(attributes)
    option_text = ", ".join(f"{name} {value}" for name, value in options.items())
    return (
        f"i am looking for a {wanted} {product.product_type} with {option_text}, "
        f"and price lower than {cap:.2f} dollars"
    )


def _gold_query(catalog: Catalog, product: Product, attributes: list[str]) -> str | None:
    for query in (f"{' '.join(attributes)} {product.product_type}", product.title):
        first_page, _ = catalog.page(query, 1)
        if product in first_page:
            return query
    return None


def goal_of(task: Task) -> dict[str, object]:
    """The goal a task's reward is computed against (stored in its metadata)."""
    return dict(task.metadata["goal"])


def shop_split_counts(count: int = 2500, test_every: int = 5) -> dict[str, int]:
    """How many of :func:`generate_shop_tasks`' ``count`` tasks each split gets, without
    generating them: ``count`` tasks, indexes 0 to count-1, every ``test_every``-th in test."""
    test = count // test_every
    return {"test": test, "train": count - test}


def generate_shop_tasks(
    catalog: Catalog, count: int = 2500, seed: int = 0, test_every: int = 5
) -> list[Task]:
    """``count`` tasks; every ``test_every``-th index is in the test split."""
    tasks: list[Task] = []
    index = 0
    attempt = 0
    while len(tasks) < count:
        rng = random.Random(f"minishop-task:{seed}:{attempt}")
        attempt += 1
        product = catalog.products[rng.randrange(len(catalog.products))]
        attributes = rng.sample(
            list(product.attributes), rng.randint(1, min(3, len(product.attributes)))
        )
        options = {name: rng.choice(values) for name, values in product.options.items()}
        cap = math.ceil(product.price * rng.uniform(1.05, 1.8) / 10) * 10.0
        query = _gold_query(catalog, product, attributes)
        if query is None:
            continue
        gold = [
            GoldCall(name="fill", arguments={"bid": "search-input", "text": query}),
            GoldCall(name="click", arguments={"bid": "search-button"}),
            GoldCall(name="click", arguments={"bid": f"product-{product.asin}"}),
            *(
                GoldCall(name="select_option", arguments={"bid": f"opt-{name}", "value": value})
                for name, value in options.items()
            ),
            GoldCall(name="click", arguments={"bid": "buy"}),
            GoldCall(name="finish", arguments={"answer": product.asin}),
        ]
        instruction = _instruction(product, attributes, options, cap)
        tasks.append(
            Task(
                id=f"minishop-{seed}-{index:05d}",
                prompt=[
                    {"role": "system", "content": SHOP_SYSTEM_PROMPT},
                    {"role": "user", "content": f"Instruction: {instruction}"},
                ],
                answer=product.asin,
                gold_actions=gold,
                split="test" if index % test_every == test_every - 1 else "train",
                metadata={
                    "instruction": instruction,
                    "goal": {
                        "asin": product.asin,
                        "name": product.product_type,
                        "category": product.category,
                        "attributes": attributes,
                        "options": options,
                        "price_upper": cap,
                        "search_query": query,
                    },
                },
            )
        )
        index += 1
    return tasks
