"""Customer-support tasks on the MiniShop catalog: a customer who wants one product.

Task ``i`` is MiniShop's task ``i`` (:func:`envhub_web.shop_tasks.generate_shop_tasks`: a
target product, some of its attributes, one value per option, a price cap) told as a
conversation. The customer's first message names only the kind of product; the
attributes, each option and the budget are hidden facts
(:class:`~envhub.users.HiddenFact`) the customer tells when the agent asks about them.
The gold path asks about all of them at once, searches with MiniShop's checked gold
query, inspects the target, orders it with the wanted options and tells the customer,
who is then done.
"""

from __future__ import annotations

from envhub import GoldCall, Task
from envhub.users import HiddenFact, UserProfile
from envhub_web.catalog import Catalog
from envhub_web.shop_tasks import generate_shop_tasks, goal_of

__all__ = ["SUPPORT_SYSTEM_PROMPT", "generate_support_tasks"]

SUPPORT_SYSTEM_PROMPT = (
    "You are a customer-support agent of MiniShop, an online store. A customer wants to buy "
    "a product. Ask them what they need: they tell you their requirements (features, "
    "options such as size or color, budget) only when you ask. Find a matching product "
    "with search_catalog and inspect_product, then order exactly one product for them "
    "with place_order, choosing the options they asked for, and tell them it is done. "
    "Talk to the customer with plain messages (no tool call); each of your messages "
    "gets their answer."
)

PERSONAS = (
    "a busy nurse who writes short, direct messages",
    "a retired teacher who is polite and a little chatty",
    "a student on a tight budget who double-checks prices",
    "a small-business owner buying for themselves, brisk but friendly",
)

_FEATURE_CUES = ("feature", "features", "requirement", "requirements", "need", "needs",
                 "must", "prefer", "preference", "preferences", "looking for")  # fmt: skip
_OPTION_CUES = ("option", "options", "variant", "variants")
_BUDGET_CUES = ("budget", "price", "spend", "cost", "afford", "how much")


def _profile(index: int, goal: dict[str, object]) -> UserProfile:
    name = str(goal["name"])
    attributes = [str(a) for a in goal["attributes"]]  # type: ignore[attr-defined]
    options = {str(k): str(v) for k, v in goal["options"].items()}  # type: ignore[attr-defined]
    cap = float(goal["price_upper"])  # type: ignore[arg-type]
    hidden = [
        HiddenFact(
            topic="features",
            fact=f"It has to be {' and '.join(attributes)}.",
            keywords=_FEATURE_CUES,
        ),
        *(
            HiddenFact(
                topic=option,
                fact=f"For the {option}, I want {value}.",
                keywords=(option, *_OPTION_CUES),
            )
            for option, value in options.items()
        ),
        HiddenFact(
            topic="budget", fact=f"My budget is {cap:.2f} dollars at most.", keywords=_BUDGET_CUES
        ),
    ]
    return UserProfile(
        persona=PERSONAS[index % len(PERSONAS)],
        goal=f"to buy one {name} that meets your requirements, and nothing else",
        opening=f"Hi! I would like to buy a {name}.",
        hidden=tuple(hidden),
        max_turns=6,
    )


def _gold(goal: dict[str, object], title: str) -> list[GoldCall]:
    name = str(goal["name"])
    options = dict(goal["options"])  # type: ignore[call-overload]
    asked = ", ".join(options) or "options"
    ordered = ", ".join(f"{k} {v}" for k, v in options.items())
    question = (
        f"Happy to help you find a {name}. Which features do you need, which {asked} "
        "do you want, and what is your budget?"
    )
    done = f"Done: I ordered the {title} ({goal['asin']}) for you, {ordered}."
    return [  # a GoldCall without a name is a message to the customer
        GoldCall(name="", arguments={"content": question}),
        GoldCall(name="search_catalog", arguments={"query": goal["search_query"]}),
        GoldCall(name="inspect_product", arguments={"asin": goal["asin"]}),
        GoldCall(name="place_order", arguments={"asin": goal["asin"], "options": options}),
        GoldCall(name="", arguments={"content": done}),
    ]


def generate_support_tasks(catalog: Catalog, count: int, seed: int = 0) -> list[Task]:
    """``count`` support tasks, split as MiniShop's (every fifth one in test)."""
    tasks = []
    for index, shop in enumerate(generate_shop_tasks(catalog, count, seed)):
        goal = goal_of(shop)
        profile = _profile(index, goal)
        tasks.append(
            Task(
                id=f"support-{seed}-{index:05d}",
                prompt=[{"role": "system", "content": SUPPORT_SYSTEM_PROMPT}],
                answer=goal["asin"],
                gold_actions=_gold(goal, catalog.by_asin[str(goal["asin"])].title),
                split=shop.split,
                metadata={"goal": goal, "user": profile.model_dump(mode="json")},
            )
        )
    return tasks
