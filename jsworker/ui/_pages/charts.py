"""The charts (``/charts``): is it getting worse? Jobs started and succeeded, retried and
dead-lettered per second, the share that succeeded, and the jobs waiting and in flight, over
a window from 15 minutes to 7 days, for the whole app or one queue, each chart on its own
scale; and how long each task's runs waited and ran (50th, 95th and 99th percentiles).

Fed from the job-events stream (``App(events=True)``): one read of the window's events,
headers only, through a throwaway consumer (:func:`jsworker.events._window.count_events`),
and one of its run events with their bodies for the times
(:func:`jsworker.events._timings.read_timings`), and one of the queues' depth samples, headers
only (:func:`jsworker.events._depth.read_depth`); a window that holds more than a read takes
is shown from its newest part that does, and the page says so."""

from __future__ import annotations

import asyncio
import math
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..._errors import EventsNotFound
from ..._wire.names import validate_name
from ...events._timings import Timings, percentile
from ...events._window import EventCounts
from .._charts import Line, line_chart
from .._errors import refuse
from .._web import Dashboard, field, page, render

#: The windows offered: their name, length and bucket (seconds); about 30 to 170 points each.
WINDOWS = {
    "15m": (900.0, 30.0),
    "1h": (3600.0, 60.0),
    "6h": (21_600.0, 300.0),
    "24h": (86_400.0, 900.0),
    "7d": (604_800.0, 3600.0),
}
_KINDS = ("started", "succeeded", "retried", "dead_lettered")
#: The percentiles of the wait and run times table.
_SHARES = (0.5, 0.95, 0.99)


def _per_second(counts: EventCounts, kind: str, queue: str | None, buckets: int) -> list[float]:
    """Events of ``kind`` per second in each of the ``buckets`` buckets counted (of ``queue``,
    or every queue together)."""
    series = [counts.rates(q, kind) for q in ([queue] if queue is not None else counts.queues())]
    return [sum(values) for values in zip(*series, strict=True)] if series else [0.0] * buckets


def _rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.2g}" if value else "0"


def _share(value: float) -> str:
    return f"{value:.0f}"


@page
async def charts_page(request: Request, d: Dashboard) -> Response:
    """The three charts for the window and queue asked for."""
    window_name = field(request.query_params, "window") or "1h"
    if window_name not in WINDOWS:
        raise refuse(400, f"unknown window {window_name[:20]!r}: use one of {', '.join(WINDOWS)}")
    queue = field(request.query_params, "queue")
    if queue is not None:
        validate_name("queue", queue)
    window, bucket = WINDOWS[window_name]
    context: dict[str, Any] = {
        "windows": list(WINDOWS),
        "window": window_name,
        "queue": queue,
        "queues": sorted(d.app.queues),
    }
    try:
        counts, timings, depth = await asyncio.gather(
            d.admin.event_counts(_KINDS, window=window, bucket=bucket),
            d.admin.job_timings(window=window),
            d.admin.queue_depth(window=window, bucket=bucket),
        )
    except EventsNotFound:
        return render(request, "charts.html", nav="charts", charts=None, **context)
    first, last = math.floor(counts.since / bucket), math.floor(counts.until / bucket)
    buckets = list(range(first, last + 1))
    starts = [n * bucket for n in buckets]
    rate = {kind: _per_second(counts, kind, queue, len(buckets)) for kind in _KINDS}
    ended = [s + f for s, f in zip(rate["succeeded"], rate["dead_lettered"], strict=True)]
    share = [100 * s / e if e else None for s, e in zip(rate["succeeded"], ended, strict=True)]
    drawn = [
        line_chart(
            "Throughput",
            starts,
            [Line("started", "started", rate["started"]), Line("succeeded", "succeeded", rate["succeeded"])],
            "jobs/s",
            _rate,
        ),
        line_chart(
            "Failures",
            starts,
            [
                Line("retried", "retried", rate["retried"]),
                Line("dead-lettered", "failed", rate["dead_lettered"]),
            ],
            "jobs/s",
            _rate,
        ),
        line_chart(
            "Succeeded of those that ended",
            starts,
            [Line("succeeded", "succeeded", share)],
            "%",
            _share,
            top=100.0,
        ),
        line_chart(
            "Queue depth",
            starts,
            [
                Line("waiting", "started", depth.series(queue, first, len(buckets), 0)),
                Line("in flight", "retried", depth.series(queue, first, len(buckets), 1)),
            ],
            "jobs",
            _rate,
        ),
    ]
    every = f"{bucket:g}-second" if bucket < 60 else f"{bucket / 60:g}-minute" if bucket < 3600 else "hour"
    return render(
        request,
        "charts.html",
        nav="charts",
        charts=drawn,
        counts=counts,
        depth=depth,
        every=every,
        timings=timings,
        times=_times(timings, queue),
        **context,
    )


def _times(timings: Timings, queue: str | None) -> list[dict[str, Any]]:
    """A row per queue and task (of ``queue`` when given): how many runs, and the 50th, 95th
    and 99th percentiles of their waits and run times."""
    rows = []
    for key in timings.measured():
        if queue is not None and key[0] != queue:
            continue
        waits, runs = timings.waits.get(key, ()), timings.runs.get(key, ())
        rows.append(
            {
                "queue": key[0],
                "task": key[1],
                "started": len(waits),
                "ended": len(runs),
                "wait": [percentile(waits, p) for p in _SHARES],
                "run": [percentile(runs, p) for p in _SHARES],
            }
        )
    return rows


routes = [Route("/charts", charts_page, methods=["GET"], name="charts")]
