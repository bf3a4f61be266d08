"""Jobs by state (``/jobs``), of a queue and a task, paged both ways; and the actions on a
selection: cancel, retry now, replay (for failed jobs: their dead letters)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..._enqueue.calls import check_job_id
from ..._errors import EventsNotFound
from ..._wire.names import validate_name
from ...admin import LISTED_STATES
from .._errors import refuse
from .._paging import EMPTY, jobs_shown
from .._web import Dashboard, action, audit, back, count, counted, field, link, many, page, render, sequence
from .bulk import STATES as ALL_STATES

PAGE = 50
# Cancels and retries of a selection run this many at a time: a cancel of a running job may
# wait a second for its worker's answer.
_AT_ONCE = 16

T = TypeVar("T")


@page
async def jobs_page(request: Request, d: Dashboard) -> Response:
    """A page of jobs in a state, of a queue and a task when given."""
    query = request.query_params
    state = query.get("state") or "queued"
    if state not in LISTED_STATES:
        raise refuse(400, f"unknown state {state[:40]!r}: use one of {', '.join(LISTED_STATES)}")
    queue = field(query, "queue")
    task = field(query, "task")
    if queue is not None:
        validate_name("queue", queue)
    if task is not None:
        validate_name("task", task)
    newest = query.get("order") == "newest"
    limit = count(query, "limit", PAGE, 500)

    listed = jobs_shown(
        d.admin,
        state,
        queue,
        task,
        newest=newest,
        limit=limit,
        after=field(query, "after"),
        before=field(query, "before"),
    )
    no_events = None
    try:
        shown, counts = await asyncio.gather(listed, _counts(d, queue, task))
    except EventsNotFound as exc:
        # A state listed from job events, in an app that keeps none: say so on the page.
        shown, counts, no_events = EMPTY, await _counts(d, queue, task), str(exc)
    return render(
        request,
        "jobs.html",
        nav="jobs",
        shown=shown,
        state=state,
        states=LISTED_STATES,
        queue=queue,
        task=task,
        queues=sorted(d.app.queues),
        tasks=sorted(d.app.tasks),
        newest=newest,
        limit=limit,
        counts=counts,
        no_events=no_events,
        bulks=[b.said() for b in d.bulks.values() if b.runner is not None and not b.runner.done()],
        all_verbs=[verb for verb, states in ALL_STATES.items() if state in states],
    )


async def _counts(d: Dashboard, queue: str | None, task: str | None) -> dict[str, int]:
    """How many jobs each state tab holds, where the server counts them without a listing:
    waiting and delayed jobs from the queues' consumers (for a queue, not a task: those figures
    are per queue), failed ones from the dead letters, and those that succeeded, were
    cancelled or expired from the job events the app keeps. Running, reserved and retrying jobs
    are counted together as in flight (``running`` holds that figure)."""
    failed, ended = await asyncio.gather(
        d.admin.count_dead_letters(task, queue), d.admin.ended_counts(queue, task)
    )
    if task is not None:
        return {"failed": failed, **ended}
    figures = [q for q in await d.admin.queues() if queue is None or q.queue == queue]
    return {
        "queued": sum(q.pending for q in figures),
        "scheduled": sum(q.delayed for q in figures),
        "in_flight": sum(q.in_flight for q in figures),
        "failed": failed,
        **ended,
    }


async def _each(items: Iterable[T], work: Callable[[T], Awaitable[bool]]) -> list[T]:
    """``work`` on every item, :data:`_AT_ONCE` at a time; the items it returned True for."""
    gate = asyncio.Semaphore(_AT_ONCE)

    async def one(item: T) -> bool:
        async with gate:
            return await work(item)

    items = list(items)
    results = await asyncio.gather(*(one(item) for item in items))
    return [item for item, ok in zip(items, results, strict=True) if ok]


@action
async def cancel(request: Request, d: Dashboard, form: FormData) -> tuple[str, str]:
    """Cancels the selected jobs."""
    ids = many(form, "id", check_job_id)
    done = await _each(ids, d.admin.cancel)
    audit(request, "cancel", job_ids=ids, cancelled=done)
    return f"Cancelled {len(done)} of {counted(len(ids), 'job')}.", back(form, link(request, "/jobs"))


@action
async def retry(request: Request, d: Dashboard, form: FormData) -> tuple[str, str]:
    """Runs the selected retrying jobs now."""
    ids = many(form, "id", check_job_id)
    done = await _each(ids, d.admin.retry_now)
    audit(request, "retry_now", job_ids=ids, retried=done)
    said = f"{len(done)} of {counted(len(ids), 'job')} will run again now"
    if len(done) < len(ids):
        # Say why, or the operator is left guessing.
        said += (
            ": the others were not waiting out a retry's delay or a snooze (running, finished, "
            "or due within a second anyway)"
        )
    return f"{said}.", back(form, link(request, "/jobs"))


@action
async def replay(request: Request, d: Dashboard, form: FormData) -> tuple[str, str]:
    """Replays the dead letters of the selected failed jobs."""
    seqs = many(form, "seq", sequence)
    jobs = await d.admin.replay_dead_letters(seqs)
    audit(request, "replay", dead_letters=seqs, job_ids=[job.id for job in jobs])
    done = f"Replayed {counted(len(jobs), 'dead letter')}."
    return done, back(form, link(request, "/jobs", state="failed"))


routes = [
    Route("/jobs", jobs_page, methods=["GET"], name="jobs"),
    Route("/jobs/cancel", cancel, methods=["POST"], name="jobs_cancel"),
    Route("/jobs/retry", retry, methods=["POST"], name="jobs_retry"),
    Route("/jobs/replay", replay, methods=["POST"], name="jobs_replay"),
]
