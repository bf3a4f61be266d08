"""The workers (``/workers``): the registry, each process with its queues, the jobs it runs
and has done, its age and whether it takes jobs; then the jobs each one runs, with how long
they have run. An operator quiets a worker (it takes no new job) or stops it."""

from __future__ import annotations

import asyncio
import time
from typing import Literal

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..._errors import ConfigurationError, JsworkerError
from .._errors import refuse
from .._feed import registered, worker_dict
from .._web import Dashboard, action, app_module, audit, back, field, link, page, render

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


async def _ask(
    request: Request, d: Dashboard, form: FormData, verb: Literal["quiet", "stop"]
) -> tuple[str, str]:
    worker = field(form, "worker")
    if worker is None:
        raise refuse(400, "which worker? the form named none")
    try:
        changed = await (d.admin.quiet_worker(worker) if verb == "quiet" else d.admin.stop_worker(worker))
    except ConfigurationError as exc:
        raise refuse(400, str(exc)) from None
    except JsworkerError as exc:
        # Gone meanwhile, most likely: its entry expires within seconds.
        return f"Worker {worker} did not answer: {exc}", back(form, link(request, "/workers"))
    audit(request, f"{verb}_worker", worker=worker, changed=changed)
    if verb == "stop":
        done = f"Worker {worker} is stopping: its running jobs get their grace period."
    else:
        done = f"Worker {worker} {'takes' if changed else 'took'} no new job{'' if changed else ' already'}."
    return done, back(form, link(request, "/workers"))


@action
async def quiet(request: Request, d: Dashboard, form: FormData) -> tuple[str, str]:
    """Asks the worker the form names to take no new job."""
    return await _ask(request, d, form, "quiet")


@action
async def stop(request: Request, d: Dashboard, form: FormData) -> tuple[str, str]:
    """Asks the worker the form names to stop."""
    return await _ask(request, d, form, "stop")


routes = [
    Route("/workers", workers_page, methods=["GET"], name="workers"),
    Route("/workers/quiet", quiet, methods=["POST"], name="workers_quiet"),
    Route("/workers/stop", stop, methods=["POST"], name="workers_stop"),
]
