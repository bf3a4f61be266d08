"""The workers (``/workers``): the registry, each process with its queues, the jobs it runs
and has done, and its age; then the jobs each one runs, with how long they have run."""

from __future__ import annotations

import asyncio
import time

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .._feed import registered, worker_dict
from .._web import Dashboard, app_module, page, render

#: The most running jobs the page lists (one page of ``Admin.running_jobs``).
RUNNING_LIMIT = 500


@page
async def workers_page(request: Request, d: Dashboard) -> Response:
    """The live workers, from the registry, and the jobs each one runs."""
    entries, running = await asyncio.gather(registered(d.admin), d.admin.running_jobs(limit=RUNNING_LIMIT))
    now = time.time()
    workers = [worker_dict(w, now) for w in entries]
    # In the registry's order, then any worker that runs jobs without an entry (its entry
    # expired, or a server too old to keep a registry names it host:pid).
    order = [w["id"] for w in workers if w["id"] in running.workers]
    order += [name for name in running.workers if name not in order]
    return render(
        request,
        "workers.html",
        nav="workers",
        workers=workers,
        running=running,
        running_order=order,
        running_limit=RUNNING_LIMIT,
        now=now,
        module=app_module(d),
    )


routes = [Route("/workers", workers_page, methods=["GET"], name="workers")]
