"""Line charts drawn on the server as SVG: a time axis, a value axis with its unit, one scale
per chart (each chart's own largest value), and each point's value as its hover title. No
script draws them: a chart reads the same with scripts off, and the page's strict content
policy is kept."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from markupsafe import Markup

# The drawing area inside the SVG's view box, and the margins the axes' labels take.
_WIDTH, _HEIGHT = 720.0, 180.0
_LEFT, _RIGHT, _TOP, _BOTTOM = 56.0, 12.0, 10.0, 26.0


@dataclass(frozen=True, slots=True)
class Line:
    """One series of a chart: its name in the legend, its CSS class (colour) and a value per
    bucket (None where there is none to show)."""

    name: str
    css: str
    values: Sequence[float | None]


def _nice_top(largest: float) -> float:
    """The value axis's top: the largest value rounded up to 1, 2 or 5 times a power of ten
    (1 when there is nothing)."""
    if largest <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(largest))
    for step in (1, 2, 5, 10):
        if largest <= step * power:
            return float(step * power)
    return float(10 * power)  # pragma: no cover - the loop ends at 10


def _ticks(scale: float) -> int:
    """How many steps the value axis of a chart topped at ``scale`` (above 0) is cut in, so
    that each tick is a round number: a top of 1 or 5 times a power of ten in fifths, any
    other (2 times one) in quarters."""
    leading = round(scale / 10 ** math.floor(math.log10(scale)), 6)
    return 5 if leading in (1, 5) else 4


def _time_label(moment: float, span: float) -> str:
    """A time axis label: the time of day for a window under two days, the day and hour past it."""
    at = datetime.fromtimestamp(moment, UTC)
    return at.strftime("%H:%M") if span < 2 * 86400 else at.strftime("%d %b %H:00")


def line_chart(
    title: str,
    starts: Sequence[float],
    lines: Sequence[Line],
    unit: str,
    show: Callable[[float], str],
    top: float | None = None,
) -> Markup:
    """An SVG chart of ``lines`` over the buckets starting at ``starts`` (unix seconds), the
    value axis labelled with ``show`` and ``unit``, from 0 to ``top`` (default: the largest
    value, rounded up)."""
    n = len(starts)
    largest = max((v for line in lines for v in line.values if v is not None), default=0.0)
    scale = top if top is not None else _nice_top(largest)
    plot_w, plot_h = _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM
    span = (starts[-1] - starts[0]) if n > 1 else 0.0

    def x(i: int) -> float:
        return _LEFT + (plot_w * i / (n - 1) if n > 1 else plot_w / 2)

    def y(value: float) -> float:
        return _TOP + plot_h * (1 - min(value, scale) / scale)

    parts: list[Markup] = [
        Markup('<svg class="chart" viewBox="0 0 {} {}" role="img" aria-label="{}">').format(
            int(_WIDTH), int(_HEIGHT), title
        ),
        Markup("<title>{}</title>").format(title),
    ]
    ticks = _ticks(scale)
    for k in range(ticks + 1):
        value = scale * k / ticks
        parts.append(
            Markup(
                '<line class="grid" x1="{l}" x2="{r}" y1="{y}" y2="{y}"/>'
                '<text class="axis" x="{tx}" y="{ty}" text-anchor="end">{label}</text>'
            ).format(
                l=_LEFT,
                r=_WIDTH - _RIGHT,
                y=round(y(value), 1),
                tx=_LEFT - 6,
                ty=round(y(value) + 4, 1),
                label=show(value),
            )
        )
    parts.append(
        Markup(
            '<text class="axis unit" x="12" y="{mid}" text-anchor="middle" '
            'transform="rotate(-90 12 {mid})">{}</text>'
        ).format(unit, mid=round(_TOP + plot_h / 2, 1))
    )
    for i in sorted({0, n // 3, 2 * n // 3, n - 1}) if n else ():
        anchor = "start" if i == 0 else "end" if i == n - 1 else "middle"
        parts.append(
            Markup('<text class="axis" x="{}" y="{}" text-anchor="{}">{}</text>').format(
                round(x(i), 1), int(_HEIGHT - 8), anchor, _time_label(starts[i], span)
            )
        )
    for line in lines:
        points = [(i, v) for i, v in enumerate(line.values) if v is not None]
        if not points:
            continue
        path = " ".join(f"{round(x(i), 1)},{round(y(v), 1)}" for i, v in points)
        parts.append(Markup('<polyline class="series {}" points="{}"/>').format(line.css, path))
        for i, v in points:
            moment = datetime.fromtimestamp(starts[i], UTC).strftime("%Y-%m-%d %H:%M UTC")
            said = Markup("{} · {}: {} {}").format(moment, line.name, show(v), unit)
            dot = Markup('<circle class="dot {}" cx="{}" cy="{}" r="3"><title>{}</title></circle>')
            parts.append(dot.format(line.css, round(x(i), 1), round(y(v), 1), said))
    parts.append(Markup("</svg>"))
    legend = Markup("").join(
        Markup('<span class="key {}">{}</span>').format(line.css, line.name) for line in lines
    )
    caption = Markup('<figcaption>{} <span class="legend">{}</span></figcaption>').format(title, legend)
    return Markup('<figure class="chart-box">{}<div class="chart-scroll">{}</div></figure>').format(
        caption, Markup("").join(parts)
    )
