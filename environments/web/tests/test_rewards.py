"""WebShop's purchase reward and the fuzzy matcher it is built on."""

from __future__ import annotations

import pytest

from envhub.rewards.web import ShopGoal, ShopPurchase, token_set_ratio, webshop_reward

GOAL = ShopGoal(
    name="polo shirt",
    category="clothing > men > shirts",
    attributes=["slim fit", "cotton"],
    options={"size": "large", "color": "navy"},
    price_upper=40.0,
)


def purchase(**changes: object) -> ShopPurchase:
    fields: dict[str, object] = dict(
        title="Acorn Slim Fit Polo Shirt",
        category="clothing > men > shirts",
        attributes=("slim fit", "cotton", "machine washable"),
        options={"size": "large", "color": "navy"},
        price=30.0,
    )
    fields.update(changes)
    return ShopPurchase(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("fuzzy wuzzy was a bear", "fuzzy fuzzy was a bear", 100.0),  # one set contains the other
        ("new york mets", "new york meats", 96.2963),
        ("navy", "black", 22.2222),  # no common token: ratio of the remainders
        ("x-large", "x large", 100.0),
    ],
)
def test_token_set_ratio_matches_rapidfuzz_definition(a: str, b: str, expected: float) -> None:
    assert token_set_ratio(a, b) == pytest.approx(expected, abs=1e-3)


def test_exact_purchase_scores_one() -> None:
    score = webshop_reward(GOAL, purchase())
    assert score.value == 1.0
    assert score.components["success"] == 1.0


def test_each_miss_costs_its_share() -> None:
    # 2 attributes + 2 options + price = 5 parts
    assert webshop_reward(
        GOAL, purchase(options={"size": "small", "color": "navy"})
    ).value == pytest.approx(4 / 5)
    assert webshop_reward(GOAL, purchase(price=45.0)).value == pytest.approx(4 / 5)
    missing_attr = purchase(attributes=("slim fit",), title="Acorn Polo Shirt")
    assert webshop_reward(GOAL, missing_attr).value == pytest.approx(4 / 5)


def test_attribute_found_in_title_counts() -> None:
    in_title = purchase(attributes=("slim fit",), title="Acorn Cotton Polo Shirt")
    assert webshop_reward(GOAL, in_title).attributes_matched == 2


def test_wrong_product_type_is_scaled_down() -> None:
    other = purchase(title="Acorn Frying Pan", category="home > kitchen")
    score = webshop_reward(GOAL, other)
    assert score.r_type == 0.0 and score.value == 0.0
    same_category = purchase(title="Acorn Shirt Hoodie")  # half the type words, same category
    assert webshop_reward(GOAL, same_category).r_type == 1.0


def test_no_purchase_scores_zero() -> None:
    score = webshop_reward(GOAL, None)
    assert score.value == 0.0 and score.components["purchased"] == 0.0
