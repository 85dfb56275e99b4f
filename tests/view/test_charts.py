"""Server-side SVG charts: bar lengths follow the values on one scale, whatever their sign
(mean rewards of a negated-reward control are negative)."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("jinja2")

from envhub.view.charts import bars

_RECT = re.compile(r'<rect class="bar" x="([\d.]+)" y="\d+" width="([\d.]+)"')


def _spans(svg: str) -> list[tuple[float, float]]:
    """(left, right) of each bar, in the order drawn."""
    return [(float(x), float(x) + float(w)) for x, w in _RECT.findall(svg)]


def test_negative_values_grow_left_of_a_zero_line_on_the_positive_scale() -> None:
    (low_l, low_r), (half_l, half_r), (pos_l, pos_r) = _spans(
        str(bars([("a", -1.0), ("b", -0.5), ("c", 0.5)], "mixed"))
    )
    assert low_r == half_r == pytest.approx(pos_l)  # every bar starts at the zero line
    assert low_r - low_l == pytest.approx(2 * (half_r - half_l))
    assert half_r - half_l == pytest.approx(pos_r - pos_l)
    assert low_l >= 150 and pos_r <= 1000  # inside the plot area (labels end at 150)


def test_all_negative_bars_stay_inside_the_chart_and_the_larger_is_longer() -> None:
    (a_l, a_r), (b_l, b_r) = _spans(str(bars([("a", -1.0), ("b", -0.5)], "negative")))
    assert a_r == pytest.approx(b_r)
    assert a_r - a_l == pytest.approx(2 * (b_r - b_l))
    assert a_l >= 150


def test_positive_bars_start_at_the_labels() -> None:
    (a_l, a_r), (b_l, b_r) = _spans(str(bars([("a", 2.0), ("b", 1.0)], "positive")))
    assert a_l == b_l == 150
    assert a_r - a_l == pytest.approx(2 * (b_r - b_l))
