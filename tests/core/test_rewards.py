import importlib.metadata
import subprocess
import sys

import pytest

from envhub.rewards import (
    Rubric,
    exact_match,
    f1,
    normalize_answer,
    numeric_match,
    parse_number,
    substring_match,
)


@pytest.mark.parametrize(
    ("pred", "gold", "expected"),
    [
        ("The Eiffel Tower!", "eiffel tower", 1.0),
        ("  an   apple ", "Apple", 1.0),
        ("Paris, France", ["paris"], 0.0),
        ("NYC", ["New York City", "NYC"], 1.0),
        ("", "", 1.0),
        ("the", "", 1.0),  # articles vanish under SQuAD normalisation
    ],
)
def test_exact_match(pred, gold, expected) -> None:
    assert exact_match(pred, gold) == expected


def test_normalize_and_substring() -> None:
    assert normalize_answer("The  Quick, brown FOX.") == "quick brown fox"
    assert substring_match("It is Paris, France.", ["paris"]) == 1.0
    assert substring_match("Lyon", ["paris"]) == 0.0


def test_f1() -> None:
    assert f1("new york city", "new york") == pytest.approx(0.8)
    assert f1("london", ["paris", "london town"]) == pytest.approx(2 / 3)
    assert f1("", "paris") == 0.0
    assert f1("a the", "an") == 1.0  # both normalise to nothing


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1,000", 1000.0),
        ("3.50", 3.5),
        ("3/4", 0.75),
        ("1 1/2", 1.5),
        ("-2", -2.0),
        ("$5", 5.0),
        ("1e3", 1000.0),
        (".5", 0.5),
        ("42.", 42.0),
        ("\u22127", -7.0),
        (7, 7.0),
        ("12,34", None),
        ("abc", None),
        ("1/0", None),
        ("", None),
        (True, None),
    ],
)
def test_parse_number(text, value) -> None:
    assert parse_number(text) == value


def test_numeric_match_tolerances() -> None:
    assert numeric_match("1,000", 1000) == 1.0
    assert numeric_match("3.50", "3.5") == 1.0
    assert numeric_match("0.3333333", "1/3", rel_tol=1e-6) == 1.0
    assert numeric_match("0.33", "1/3") == 0.0
    assert numeric_match("3.504", "3.50", rel_tol=0, abs_tol=0.005) == 1.0
    assert numeric_match("3.51", "3.50", rel_tol=0, abs_tol=0.005) == 0.0
    assert numeric_match("nan", "nan") == 0.0
    assert numeric_match("seven", "7") == 0.0


def test_rubric_weights_and_metrics() -> None:
    rubric = Rubric({"correct": 1.0, "format": 0.5, "length": 0.0})
    reward = rubric.score({"correct": 1, "format": 0, "length": 12}, note="x")
    assert (
        reward.value == 1.0 and reward.components["length"] == 12.0 and reward.info == {"note": "x"}
    )
    assert Rubric({"a": 1.0, "b": 3.0}, normalize=True).score({"a": 1, "b": 1}).value == 1.0
    assert Rubric({"a": 1.0}).evaluate({"a": lambda: 0.25}).value == 0.25
    with pytest.raises(ValueError, match="missing: b"):
        Rubric({"a": 1.0, "b": 1.0}).score({"a": 1})


def test_sql_execution_match_on_a_core_install() -> None:
    """Without sqlglot (blocked in a fresh interpreter), every comparator works and only
    Spider's ORDER BY rule, which parses SQL, says what to install."""
    code = (
        "import sys\n"
        "sys.modules['sqlglot'] = None\n"
        "from envhub.rewards.sql import execution_match\n"
        "assert execution_match([(1,), (2,)], [(2,), (1,)], 'bird') == 1.0\n"
        "assert execution_match([(1, 2)], [(2, 1)], 'spider', order_matters=True) == 1.0\n"
        "try:\n"
        "    execution_match([(1,)], [(1,)], 'spider', gold_sql='SELECT a FROM t ORDER BY a')\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc.name, exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("sqlglot ") and "pip install 'envhub-rl[sql]'" in out.stdout
    requires = importlib.metadata.requires("envhub-rl") or []
    assert any(r.startswith("sqlglot") and 'extra == "sql"' in r for r in requires), requires
