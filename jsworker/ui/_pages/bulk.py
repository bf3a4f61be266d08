"""Every job matching a listing's filters, across its pages (``/jobs/all``): cancel them, or
run the retrying ones now. The page asks first (how many the server counts, where it can), the
work runs beside the request, page after page of the listing, and the jobs page says how far
it got; one audit line as it starts and one with its count when done."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..._errors import JsworkerError
from ..._observability.logging import get_logger
from ..._wire.names import validate_name
from ...admin import Admin, ListedState
from .._errors import refuse
from .._running import Bulk, Verb
from .._web import Dashboard, action, audited, back, field, link, page, render

log = get_logger("jsworker.ui")

#: What each verb may be done to: a cancel stops any job not ended, run now only a retrying one.
STATES: dict[Verb, tuple[ListedState, ...]] = {
    "cancel": ("scheduled", "queued", "reserved", "running", "retrying"),
    "retry": ("retrying",),
}
# Jobs read a page at a time, and acted on this many at a time.
_PAGE = 500
_AT_ONCE = 16


def _wanted(source: FormData | dict[str, str]) -> tuple[Verb, ListedState, str | None, str | None]:
    """The action, state and filters a form or query names; refused when they do not fit."""
    verb, state = field(source, "verb"), field(source, "state")
    if verb not in STATES:
        raise refuse(400, "do what to every matching job? cancel or retry")
    if state not in STATES[verb]:
        raise refuse(400, f"{verb} applies to jobs {', '.join(STATES[verb])}, not {str(state)[:20]!r}")
    queue, task = field(source, "queue"), field(source, "task")
    return (
        verb,
        state,
        validate_name("queue", queue) if queue else None,
        validate_name("task", task) if task else None,
    )


@page
async def confirm(request: Request, d: Dashboard) -> Response:
    """Asks before acting on every matching job."""
    verb, state, queue, task = _wanted(dict(request.query_params))
    return render(request, "confirm_all.html", nav="jobs", verb=verb, state=state, queue=queue, task=task)


@action
async def act(request: Request, d: Dashboard, form: FormData) -> tuple[str, str]:
    """Starts the action the confirmation page named, unless it runs already."""
    verb, state, queue, task = _wanted(form)
    listing = link(request, "/jobs", state=state, queue=queue, task=task)
    if field(form, "confirm") != verb:
        return f"Nothing done: type {verb} to confirm.", link(
            request, "/jobs/all", verb=verb, state=state, queue=queue, task=task
        )
    bulk = Bulk(verb, state, queue, task)
    running = d.bulks.get(bulk.key)
    if running is not None and running.runner is not None and not running.runner.done():
        return running.said(), back(form, listing)
    audit_done = audited(request)
    audit_done(f"{verb}_all_started", state=state, queue=queue, task=task)
    work = d.admin.cancel if verb == "cancel" else d.admin.retry_now
    bulk.runner = asyncio.create_task(_run(d.admin, bulk, work, audit_done))
    d.bulks[bulk.key] = bulk
    return bulk.said(), listing


async def _run(
    admin: Admin, bulk: Bulk, work: Callable[[str], Awaitable[bool]], audit_done: Callable[..., None]
) -> None:
    """Every job of the listing, oldest first, page after page; its audit line once done."""
    gate = asyncio.Semaphore(_AT_ONCE)

    async def one(job_id: str) -> None:
        async with gate:
            if await work(job_id):
                bulk.done += 1

    fields = {"state": bulk.state, "queue": bulk.queue, "task": bulk.task}
    try:
        after: str | None = None
        while True:
            jobs = await admin.jobs(bulk.queue, bulk.state, bulk.task, _PAGE, after)
            bulk.seen += len(jobs.items)
            await asyncio.gather(*(one(job.id) for job in jobs.items))
            if jobs.next_after is None:
                break
            after = jobs.next_after
    except JsworkerError as exc:
        audit_done(f"{bulk.verb}_all", **fields, done=bulk.done, error=str(exc))
    except Exception as exc:  # no request is left to answer: said here, or never
        log.exception("ui.bulk_failed", verb=bulk.verb)
        audit_done(f"{bulk.verb}_all", **fields, done=bulk.done, error=repr(exc))
    else:
        audit_done(f"{bulk.verb}_all", **fields, done=bulk.done, read=bulk.seen)


routes = [
    Route("/jobs/all", confirm, methods=["GET"], name="jobs_all_confirm"),
    Route("/jobs/all", act, methods=["POST"], name="jobs_all"),
]
