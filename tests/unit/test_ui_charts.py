"""The dashboard's SVG charts: one scale per chart, rounded up to a readable top; labelled
axes with the unit; a hover title per point; gaps where a value is missing; names escaped."""

from __future__ import annotations

import re

from jsworker.events._timings import percentile
from jsworker.ui._charts import Line, line_chart


def _show(value: float) -> str:
    return f"{value:g}"


def test_a_chart_has_axes_with_its_unit_and_a_hover_title_per_point() -> None:
    starts = [1_700_000_000.0 + 60 * i for i in range(4)]
    started = Line("started", "started", [0.5, 3.7, None, 1.0])
    svg = str(line_chart("Throughput", starts, [started], "jobs/s", _show))
    # The value axis runs from 0 to the largest value rounded up (3.7 -> 5), in round steps.
    assert re.findall(r'text-anchor="end">([^<]+)</text>', svg)[:6] == ["0", "1", "2", "3", "4", "5"]
    assert ">jobs/s</text>" in svg
    # A time label at each end of the time axis.
    assert ">22:13</text>" in svg and ">22:16</text>" in svg
    # Three points (the missing value is a gap, not a zero), each with its value on hover.
    titles = re.findall(r"<circle [^>]*><title>([^<]+)</title>", svg)
    assert titles == [
        "2023-11-14 22:13 UTC · started: 0.5 jobs/s",
        "2023-11-14 22:14 UTC · started: 3.7 jobs/s",
        "2023-11-14 22:16 UTC · started: 1 jobs/s",
    ]


def test_each_chart_has_its_own_scale_and_a_fixed_top_when_given() -> None:
    starts = [0.0, 60.0]
    small = str(line_chart("A", starts, [Line("a", "a", [0.01, 0.02])], "jobs/s", _show))
    large = str(line_chart("B", starts, [Line("b", "b", [900.0, 1200.0])], "jobs/s", _show))
    share = str(line_chart("C", starts, [Line("c", "c", [10.0, 20.0])], "%", _show, top=100.0))
    assert re.findall(r'text-anchor="end">([^<]+)</text>', small)[4] == "0.02"
    assert re.findall(r'text-anchor="end">([^<]+)</text>', large)[4] == "2000"
    assert re.findall(r'text-anchor="end">([^<]+)</text>', share)[:6] == ["0", "20", "40", "60", "80", "100"]
    # Nothing at all: a chart from 0 to 1, with no line.
    empty = str(line_chart("D", starts, [Line("d", "d", [None, None])], "jobs/s", _show))
    assert "<polyline" not in empty and re.findall(r'text-anchor="end">([^<]+)</text>', empty)[5] == "1"


def test_names_are_escaped() -> None:
    svg = str(line_chart("<b>x</b>", [0.0], [Line("<i>", "c", [1.0])], "jobs/s", _show))
    assert "<b>" not in svg and "<i>" not in svg and "&lt;b&gt;" in svg


def test_percentiles_by_nearest_rank() -> None:
    ordered = [float(n) for n in range(1, 101)]
    assert [percentile(ordered, p) for p in (0.5, 0.95, 0.99, 1.0)] == [50.0, 95.0, 99.0, 100.0]
    assert percentile([7.0], 0.99) == 7.0 and percentile([], 0.5) is None
