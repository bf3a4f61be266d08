"""The overview (``/``): every queue's figures and charts, the workers, the server's health;
and the live feed every page updates itself from (``/live``, ``/live.json``)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .._feed import health_dict, registered, totals, worker_dict
from .._web import Dashboard, app_module, dashboard, page, render

#: Seconds one event stream stays open; the browser opens the next one by itself.
STREAM_FOR = 600.0


@page
async def overview(request: Request, d: Dashboard) -> Response:
    """Every queue with its figures, the totals, the server's health."""
    queues, workers, health = await asyncio.gather(d.admin.queues(), registered(d.admin), d.admin.health())
    now = time.time()
    return render(
        request,
        "overview.html",
        nav="overview",
        queues=queues,
        totals=totals(queues, workers),
        health=health_dict(health),
        workers=[worker_dict(w, now) for w in workers],
        charts=d.feed.charts(),
        module=app_module(d),
    )


async def live(request: Request) -> Response:
    """The feed as server-sent events: the newest figures, then each new reading."""
    d = dashboard(request)

    async def events() -> AsyncIterator[str]:
        # The browser waits this long before it opens the stream again after it ends.
        yield "retry: 2000\n\n"
        async for snapshot in d.feed.updates(limit=STREAM_FOR):
            yield f"data: {json.dumps(snapshot, separators=(',', ':'))}\n\n"

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def live_json(request: Request) -> Response:
    """The newest figures as one JSON document."""
    return JSONResponse(await dashboard(request).feed.latest(), headers={"Cache-Control": "no-store"})


routes = [
    Route("/", overview, methods=["GET"], name="overview"),
    Route("/live", live, methods=["GET"], name="live"),
    Route("/live.json", live_json, methods=["GET"], name="live_json"),
]
