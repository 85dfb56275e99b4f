"""The execution-match comparators of ``envhub.rewards.sql``, as pure functions."""

from __future__ import annotations

import subprocess
import sys

import pytest

from envhub.rewards.sql import execution_match, has_order_by, spider_match

GOLD = [(1, "Rock", 10.5), (2, "Jazz", 3.0), (3, "Metal", 7.25)]
PERMUTED = [(name, value, key) for key, name, value in GOLD]


def test_permuted_columns_match_only_under_spider() -> None:
    assert execution_match(PERMUTED, GOLD, "spider") == 1.0
    assert execution_match(PERMUTED, GOLD, "bird") == 0.0
    assert execution_match(PERMUTED, GOLD, "strict") == 0.0


def test_row_order_matters_for_spider_only_when_gold_orders() -> None:
    reversed_rows = list(reversed(GOLD))
    assert execution_match(reversed_rows, GOLD, "spider", gold_sql="SELECT a, b, c FROM t") == 1.0
    assert (
        execution_match(reversed_rows, GOLD, "spider", gold_sql="SELECT a, b, c FROM t ORDER BY a")
        == 0.0
    )
    assert execution_match(reversed_rows, GOLD, "bird") == 1.0
    assert execution_match(reversed_rows, GOLD, "strict") == 0.0


def test_duplicates_are_ignored_by_bird_but_counted_by_spider() -> None:
    gold = [("a",), ("b",)]
    doubled = [("a",), ("a",), ("b",)]
    assert execution_match(doubled, gold, "bird") == 1.0
    assert execution_match(doubled, gold, "spider") == 0.0
    assert execution_match(doubled, gold, "strict") == 0.0


def test_wrong_values_and_shapes_fail_everywhere() -> None:
    for comparator in ("bird", "spider", "strict"):
        assert execution_match([(1, "Rock", 10.5)], GOLD, comparator) == 0.0
        assert execution_match([(row[0],) for row in GOLD], GOLD, comparator) == 0.0
        assert execution_match([(1, "Rock", 99.0), *GOLD[1:]], GOLD, comparator) == 0.0


def test_spider_permutation_needs_one_consistent_column_mapping() -> None:
    # each column's values match some gold column, but no single permutation fits all rows
    gold = [(1, 2), (2, 1)]
    assert spider_match([(1, 1), (2, 2)], gold) is False
    assert spider_match([(2, 1), (1, 2)], gold) is True
    assert spider_match([], []) is True


def test_has_order_by_looks_at_the_outermost_query() -> None:
    assert has_order_by("SELECT a FROM t ORDER BY a LIMIT 3")
    assert not has_order_by("SELECT a FROM (SELECT a FROM t ORDER BY a) AS s")
    assert has_order_by("SELECT a FROM t UNION SELECT b FROM u ORDER BY 1")


def test_unknown_comparator_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown comparator 'exact'"):
        execution_match(GOLD, GOLD, "exact")


def test_rewards_package_does_not_import_sqlglot() -> None:
    code = "import sys, envhub.rewards, envhub.rewards.sql; print('sqlglot' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
