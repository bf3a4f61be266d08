"""The workers (``/workers``): the registry, each process with its queues, the jobs it runs
and has done, and its age."""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..feed import registered, worker_dict
from ..web import Dashboard, page, render


@page
async def workers_page(request: Request, d: Dashboard) -> Response:
    """The live workers, from the registry."""
    now = time.time()
    workers = [worker_dict(w, now) for w in await registered(d.admin)]
    return render(request, "workers.html", nav="workers", workers=workers)


routes = [Route("/workers", workers_page, methods=["GET"], name="workers")]
