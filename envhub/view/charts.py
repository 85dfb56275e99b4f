"""Charts as inline SVG markup, drawn on the server: a page needs no script and no
network to show them, and the same markup goes into the self-contained HTML report.

Each function takes plain numbers and returns :class:`markupsafe.Markup`; labels are
escaped. Values are summarised before drawing (bins, bars), so a chart of 100,000
episodes is a few dozen elements.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from markupsafe import Markup, escape

__all__ = ["bars", "histogram", "note"]

_WIDTH = 420
_HEIGHT = 170
_PAD_LEFT = 44
_PAD_BOTTOM = 30
_PAD_TOP = 10


def _fmt(value: float) -> str:
    if value == int(value) and abs(value) < 1e6:
        return str(int(value))
    return f"{value:.3g}"


def note(title: str, text: str = "no data") -> Markup:
    """A chart-sized line of text in place of a chart: what there is nothing to draw of."""
    return Markup(
        '<svg class="chart" role="img" width="{w}" height="40" viewBox="0 0 {w} 40">'
        '<title>{t}</title><text x="4" y="24" class="muted">{text}</text></svg>'
    ).format(w=_WIDTH, t=title, text=text)


def histogram(values: Sequence[float | None], title: str, unit: str = "", bins: int = 20) -> Markup:
    """A histogram of ``values`` (``None`` skipped); integer data gets one bar per value
    when there are few distinct values."""
    data = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not data:
        return note(title)
    low, high = min(data), max(data)
    # no high - low, low + i * step or v - low: near ±1e308 values are finite but those
    # are not; the edges are weighted means of low and high instead
    step = high / bins - low / bins
    integral = all(v == int(v) for v in data) and high / 2 - low / 2 < 20
    if integral:
        step, edges = 1.0, [low + i for i in range(int(high - low) + 2)]
    elif step > 0:
        edges = [low * (1 - i / bins) + high * (i / bins) for i in range(bins)] + [high]
    else:  # one value, or values too close to tell apart
        step, edges = 1.0, [low, low + 1]
    counts = [0] * (len(edges) - 1)
    for v in data:
        i = min(int(v / step - low / step), len(counts) - 1)
        counts[i] += 1
    peak = max(counts)
    plot_w = _WIDTH - _PAD_LEFT - 8
    plot_h = _HEIGHT - _PAD_BOTTOM - _PAD_TOP
    bar_w = plot_w / len(counts)
    parts = [
        Markup(
            '<svg class="chart" role="img" width="{w}" height="{h}" viewBox="0 0 {w} {h}">'
            "<title>{t}</title>"
        ).format(w=_WIDTH, h=_HEIGHT, t=title)
    ]
    for i, n in enumerate(counts):
        if not n:
            continue
        h = plot_h * n / peak
        left = edges[i]
        label = _fmt(left) if integral else f"{_fmt(left)}–{_fmt(edges[i + 1])}"
        parts.append(
            Markup(
                '<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{bw:.1f}" height="{bh:.1f}">'
                "<title>{label}{unit}: {n}</title></rect>"
            ).format(
                x=_PAD_LEFT + i * bar_w + 0.5,
                y=_PAD_TOP + plot_h - h,
                bw=max(bar_w - 1, 1),
                bh=h,
                label=label,
                unit=unit,
                n=n,
            )
        )
    axis_y = _PAD_TOP + plot_h
    parts.append(
        Markup(
            '<line class="axis" x1="{x0}" y1="{y}" x2="{x1}" y2="{y}"/>'
            '<text x="{x0}" y="{ty}" class="tick">{lo}{unit}</text>'
            '<text x="{x1}" y="{ty}" class="tick" text-anchor="end">{hi}{unit}</text>'
            '<text x="{lx}" y="{py}" class="tick" text-anchor="end">{peak}</text>'
            '<text x="{lx}" y="{y}" class="tick" text-anchor="end">0</text>'
        ).format(
            x0=_PAD_LEFT,
            x1=_WIDTH - 8,
            y=axis_y,
            ty=axis_y + 16,
            lo=_fmt(edges[0]),
            hi=_fmt(edges[-1] - 1 if integral else edges[-1]),
            unit=unit,
            lx=_PAD_LEFT - 4,
            py=_PAD_TOP + 10,
            peak=peak,
        )
    )
    parts.append(Markup("</svg>"))
    return Markup("").join(parts)


def bars(
    items: Sequence[tuple[str, float]],
    title: str,
    value_format: str = "{:g}",
    limit: int = 30,
    noun: str = "bars",
) -> Markup:
    """Horizontal bars, one per (label, value), in the order given: the first ``limit``,
    under a line saying so ("30 of 60 tasks shown", ``noun`` naming what a bar is) when
    there are more, so a capped chart never passes for the whole.

    Bars grow from a zero line: right for positive values, left for negative ones (mean
    rewards can be negative), on one scale, so lengths compare across signs."""
    everything = list(items)
    rows = everything[:limit]
    if not rows:
        return note(title)
    label_w = 150
    row_h = 18
    top = row_h if len(everything) > limit else 0  # room for the "N of M shown" line
    height = top + row_h * len(rows) + 6
    low = min(0.0, *(v for _, v in rows))
    scale = (_WIDTH - label_w - 60) / ((max(0.0, *(v for _, v in rows)) - low) or 1)
    zero_x = label_w - low * scale
    parts = [
        Markup(
            '<svg class="chart" role="img" width="{w}" height="{h}" viewBox="0 0 {w} {h}">'
            "<title>{t}</title>"
        ).format(w=_WIDTH, h=height, t=title)
    ]
    if top:
        parts.append(
            Markup('<text x="4" y="12" class="muted capped">{n} of {total} {noun} shown</text>')
            .format(n=len(rows), total=len(everything), noun=noun)
        )
    if low < 0:
        parts.append(
            Markup('<line class="axis" x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{h}"/>').format(
                x=zero_x, y=top, h=height
            )
        )
    for i, (label, value) in enumerate(rows):
        y = top + 3 + i * row_h
        x = zero_x + min(value, 0.0) * scale
        width = abs(value) * scale
        short = label if len(label) <= 22 else label[:21] + "…"
        parts.append(
            Markup(
                '<text x="{lx}" y="{ty}" class="tick" text-anchor="end">{short}<title>{label}'
                '</title></text><rect class="bar" x="{x:.1f}" y="{y}" width="{bw:.1f}" '
                'height="{bh}"><title>{label}: {value}</title></rect>'
                '<text x="{vx:.1f}" y="{ty}" class="tick">{value}</text>'
            ).format(
                lx=label_w - 4,
                ty=y + 12,
                short=short,
                label=label,
                x=x,
                y=y,
                bw=width,
                bh=row_h - 4,
                value=escape(value_format.format(value)),
                vx=max(x + width, zero_x) + 4,
            )
        )
    parts.append(Markup("</svg>"))
    return Markup("").join(parts)
