"""A queue (``/queues/<name>``): its figures, its waiting jobs paged both ways, pause,
resume and purge (after a confirmation page), and its limits changed at run time."""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..._core.queues import QueueStatus
from ..._errors import JsworkerError
from ..._limits.overrides import DECLARED, NO_LIMIT, queue_rate
from ..._wire.names import validate_name
from .._errors import refuse
from .._paging import jobs_shown
from .._web import Dashboard, action, audit, count, counted, field, link, page, render

PAGE = 50


async def _status(d: Dashboard, queue: str) -> QueueStatus:
    validate_name("queue", queue)
    for status in await d.admin.queues():
        if status.queue == queue:
            return status
    raise refuse(
        404, f"no queue {queue!r}: the app declares none of that name and the server holds nothing of it"
    )


@page
async def queue_page(request: Request, d: Dashboard) -> Response:
    """The queue's figures and a page of its waiting jobs."""
    queue = request.path_params["queue"]
    status = await _status(d, queue)
    query = request.query_params
    newest = query.get("order") == "newest"
    limit = count(query, "limit", PAGE, 500)

    shown = await jobs_shown(
        d.admin,
        "queued",
        queue,
        None,
        newest=newest,
        limit=limit,
        after=field(query, "after"),
        before=field(query, "before"),
    )
    declared = d.admin.app.queue_options.get(queue)
    return render(
        request,
        "queue.html",
        nav="overview",
        queue=status,
        shown=shown,
        newest=newest,
        limit=limit,
        declared_running=declared.max_running if declared else None,
        declared_rate=declared.rate_limit.text if declared and declared.rate_limit else None,
        rate=queue_rate(declared.rate_limit if declared else None, status.overrides),
    )


@page
async def purge_confirm(request: Request, d: Dashboard) -> Response:
    """Asks before a purge: how many jobs would go (a task's: every one the server holds)."""
    status = await _status(d, request.path_params["queue"])
    task = field(request.query_params, "task")
    if task is not None:
        validate_name("task", task)
    return render(request, "confirm_purge_queue.html", nav="overview", queue=status, task=task)


@action
async def pause(request: Request, d: Dashboard, form: FormData) -> tuple[str, str]:
    """Pauses the queue's consumer until resumed."""
    queue = validate_name("queue", request.path_params["queue"])
    await d.admin.pause_queue(queue)
    audit(request, "pause_queue", queue=queue)
    return f"Paused {queue}: workers take none of its jobs until it is resumed.", link(
        request, f"/queues/{queue}"
    )


@action
async def resume(request: Request, d: Dashboard, form: FormData) -> tuple[str, str]:
    """Resumes the queue's consumer."""
    queue = validate_name("queue", request.path_params["queue"])
    was = await d.admin.resume_queue(queue)
    audit(request, "resume_queue", queue=queue, was_paused=was)
    done = f"Resumed {queue}." if was else f"{queue} was not paused."
    return done, link(request, f"/queues/{queue}")


@action
async def limits(request: Request, d: Dashboard, form: FormData) -> tuple[str, str]:
    """Sets the queue's max_running and rate limit as the form says (blank: none), or both
    back to the code's (``declared``)."""
    queue = validate_name("queue", request.path_params["queue"])
    running: int | str | None
    rate: str | None
    if field(form, "declared"):
        running, rate = DECLARED, DECLARED
    else:
        text = field(form, "max_running") or "0"
        if not text.isdigit():
            raise refuse(400, f"max_running is a whole number (0 or blank for none), not {text[:20]!r}")
        running, rate = int(text), field(form, "rate_limit") or NO_LIMIT
        # A field left as it shows is left as it is: saving a new rate does not make the
        # code's max_running one set at run time.
        status = await _status(d, queue)
        declared = d.admin.app.queue_options.get(queue)
        shown = queue_rate(declared.rate_limit if declared else None, status.overrides)
        if running == (status.max_running or 0):
            running = None
        if rate == (shown.text if shown else NO_LIMIT):
            rate = None
    try:
        kept = await d.admin.set_queue_limits(queue, max_running=running, rate_limit=rate)
    except JsworkerError as exc:
        raise refuse(400, f"limits of {queue} not changed: {exc}") from exc
    audit(request, "set_queue_limits", queue=queue, max_running=running, rate_limit=rate)
    said = ", ".join(f"{name.replace('_', ' ')} {value}" for name, value in kept.items())
    done = f"Limits of {queue} set: {said}." if kept else f"Limits of {queue} are the code's again."
    return done + " Workers follow within seconds.", link(request, f"/queues/{queue}")


@action
async def purge(request: Request, d: Dashboard, form: FormData) -> tuple[str, str]:
    """Purges the queue's jobs once the confirmation page's form says so."""
    queue = validate_name("queue", request.path_params["queue"])
    task = field(form, "task") or None
    named, what = (task, "task") if task is not None else (queue, "queue")
    if field(form, "confirm") != named:
        # Back to the question, saying why: the operator may have mistyped.
        return f"Nothing purged: type the {what}'s name ({named}) to confirm.", link(
            request, f"/queues/{queue}/purge", task=task
        )
    removed = await d.admin.purge_queue(queue, task)
    audit(request, "purge_queue", queue=queue, task=task, removed=removed)
    of = f"task {task} in {queue}" if task is not None else queue
    return f"Purged {counted(removed, 'job')} of {of}.", link(request, f"/queues/{queue}")


routes = [
    Route("/queues/{queue}", queue_page, methods=["GET"], name="queue"),
    Route("/queues/{queue}/purge", purge_confirm, methods=["GET"], name="queue_purge_confirm"),
    Route("/queues/{queue}/purge", purge, methods=["POST"], name="queue_purge"),
    Route("/queues/{queue}/pause", pause, methods=["POST"], name="queue_pause"),
    Route("/queues/{queue}/resume", resume, methods=["POST"], name="queue_resume"),
    Route("/queues/{queue}/limits", limits, methods=["POST"], name="queue_limits"),
]
