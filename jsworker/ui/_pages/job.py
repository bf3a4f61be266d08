"""One job (``/jobs/<id>``, found with the search box at ``/job?id=``): its state, attempts,
times, worker, headers, error with traceback; its events timeline (apps with job events) and
its workflow (a step of a chain, group or chord); its payload and result after a click (never
with payloads off); cancel, retry now, and replay a failed one from its dead letter."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ..._core.job_status import JobState
from ..._deadletters.letter import DeadLetter
from ..._enqueue.calls import check_job_id, is_job_id
from ..._errors import DeadLetterNotFound, EventsNotFound, JobNotFound, StreamRequestError
from ..._wire.headers import CONTENT_TYPE
from ...events import JobEvent
from ...events._window import JobTimeline
from ...workflows import WorkflowStatus
from .._errors import describe, refuse
from .._formats import duration
from .._payloads import readable
from .._web import Dashboard, action, audit, back, field, link, page, render

#: The states a cancel can still stop.
CANCELLABLE = {JobState.SCHEDULED, JobState.QUEUED, JobState.RUNNING, JobState.RETRYING, JobState.SNOOZED}
_SHOWABLE = {"payload", "result"}
# The longest text the search box takes.
_MAX_TERM = 128


@page
async def search(request: Request, d: Dashboard) -> Response:
    """The search box's target: a job's page by its id; a task's name finds its jobs, a
    queue's name the queue, ``#<n>`` dead letter ``n``; any other text the newest waiting jobs
    and dead letters that hold it (see :mod:`jsworker.admin._search`)."""
    given = field(request.query_params, "id")
    if given is None:
        return render(request, "search.html", nav="job")
    term = given.strip()
    if term in d.app.tasks:
        return RedirectResponse(link(request, "/jobs", task=term), status_code=303)
    if term in d.app.queues:
        return RedirectResponse(link(request, f"/queues/{term}"), status_code=303)
    if term.startswith("#") and term[1:].isascii() and term[1:].isdigit():
        return RedirectResponse(link(request, f"/dead-letters/{int(term[1:])}"), status_code=303)
    if not term or len(term) > _MAX_TERM:
        raise refuse(400, f"search for 1 to {_MAX_TERM} characters")
    # Part of an id, an argument's value, a header's, a failure's words: searched while a
    # term that may be a whole id is looked up, so a miss costs the longer of the two only.
    searching = asyncio.ensure_future(d.admin.search(term, arguments=d.settings.payloads))
    try:
        if is_job_id(term) and (await d.admin.job(term)).state is not JobState.UNKNOWN:
            return RedirectResponse(link(request, f"/jobs/{term}"), status_code=303)
        found = await searching
    finally:
        searching.cancel()
    return render(request, "search.html", nav="job", term=term, found=found)


@page
async def job_page(request: Request, d: Dashboard) -> Response:
    """What the server keeps of the job; its payload or result when asked for."""
    job_id = check_job_id(request.path_params["job_id"])
    show = field(request.query_params, "show")
    if show is not None and show not in _SHOWABLE:
        raise refuse(400, "show what? payload or result")
    if show is not None and not d.settings.payloads:
        raise refuse(403, "this dashboard shows no payloads or results")
    status = await d.admin.job(job_id)
    if status.state is JobState.UNKNOWN:
        raise refuse(
            404,
            f"no job {job_id} is known: never enqueued, or finished without a record (a success of a "
            "task that keeps no results, or its record expired)",
        )
    message = await d.admin.job_message(job_id) if not status.state.finished else None
    shown = None
    if show == "payload":
        if message is None:
            raise refuse(
                404, "the server no longer holds this job's payload (a failed job's is in its dead letter)"
            )
        shown = readable(message.body or b"", message.headers.get(CONTENT_TYPE))
    elif show == "result":
        result = await d.admin.job_result(job_id)
        if result is None:
            raise refuse(404, "this job's record keeps no result")
        shown = readable(result.value, result.content_type)
    timeline, timeline_note = await _timeline(d, job_id)
    workflow = await _workflow(d, job_id)
    letter = await _letter(d, job_id) if status.state is JobState.FAILED else None
    return render(
        request,
        "job.html",
        nav="job",
        job=status,
        timeline=timeline,
        timeline_note=timeline_note,
        details=event_details,
        workflow=workflow,
        steps=workflow_steps(workflow) if workflow is not None else [],
        more_steps=max(0, len(workflow.steps) - MAX_STEPS) if workflow is not None else 0,
        headers=sorted(message.headers.items()) if message is not None else None,
        size=message.size if message is not None else None,
        cancellable=status.state in CANCELLABLE,
        letter=letter,
        shown=shown,
        show=show,
    )


async def _timeline(d: Dashboard, job_id: str) -> tuple[JobTimeline | None, str | None]:
    """The job's events, or why there are none to show (None, None: the app has no events)."""
    if not d.app.options.events:
        return None, None
    try:
        return await d.admin.job_events(job_id), None
    except EventsNotFound:
        return None, "No job-events stream yet: no worker of the app has run with events on."
    except StreamRequestError as exc:
        # The rest of the page stands without its timeline.
        return None, f"The job's events could not be read: {describe(exc).message}"


def event_details(event: JobEvent) -> str:
    """What a timeline's row says of ``event`` beyond its kind, attempt and worker."""
    parts = []
    if event.queue_wait is not None:
        parts.append(f"waited {duration(event.queue_wait)}")
    if event.duration is not None:
        parts.append(f"ran {duration(event.duration)}")
    if event.delay is not None:
        parts.append(f"{'due in' if event.event == 'scheduled' else 'again in'} {duration(event.delay)}")
    if event.outcome and event.outcome != event.event:
        parts.append(event.outcome)
    if event.reason:
        parts.append(event.reason)
    return " · ".join(parts)


#: The most steps of a workflow the job page lists (a group may have thousands).
MAX_STEPS = 200


def workflow_steps(flow: WorkflowStatus) -> list[dict[str, Any]]:
    """The rows of a workflow's table: each step's label, the ``at`` key that names it when
    it ended the workflow, and its job status (None for a chain's step not enqueued yet)."""
    rows = []
    for i, status in enumerate(flow.steps[:MAX_STEPS]):
        if status is not None and status.id.endswith("-cb"):
            label, key = "callback", "cb"
        elif flow.kind == "chain":
            label, key = f"step {i + 1}", str(i)
        else:
            label, key = f"member {i + 1}", f"m{i}"
        rows.append({"label": label, "ended_it": flow.at == key, "job": status})
    return rows


async def _workflow(d: Dashboard, job_id: str) -> WorkflowStatus | None:
    """The workflow the job is a step of, None when it is none (or it expired)."""
    flow_id = await d.admin.workflow_of(job_id)
    if flow_id is None:
        return None
    try:
        return await d.admin.workflow(flow_id)
    except JobNotFound:
        return None


async def _letter(d: Dashboard, job_id: str) -> DeadLetter | None:
    """The newest dead letter of a failed job (None once purged)."""
    try:
        return await d.admin.dead_letter(job_id)
    except DeadLetterNotFound:
        return None


@action
async def cancel(request: Request, d: Dashboard, form: FormData) -> tuple[str, str]:
    """Cancels the job."""
    job_id = check_job_id(request.path_params["job_id"])
    done = await d.admin.cancel(job_id)
    audit(request, "cancel", job_ids=[job_id], cancelled=[job_id] if done else [])
    said = f"Cancelled {job_id}." if done else f"{job_id} had nothing left to cancel."
    return said, back(form, link(request, f"/jobs/{job_id}"))


@action
async def retry(request: Request, d: Dashboard, form: FormData) -> tuple[str, str]:
    """Runs the retrying (or snoozed) job now."""
    job_id = check_job_id(request.path_params["job_id"])
    done = await d.admin.retry_now(job_id)
    audit(request, "retry_now", job_ids=[job_id], retried=[job_id] if done else [])
    said = f"{job_id} runs again now." if done else f"{job_id} is not waiting for a retry or a snooze."
    return said, back(form, link(request, f"/jobs/{job_id}"))


@action
async def replay(request: Request, d: Dashboard, form: FormData) -> tuple[str, str]:
    """Replays the failed job's newest dead letter: the job runs again, under its id, from its
    first attempt; back to its page, which now follows it."""
    job_id = check_job_id(request.path_params["job_id"])
    letter = await _letter(d, job_id)
    if letter is None:
        return f"{job_id} has no dead letter to replay (purged, or replayed already).", link(
            request, f"/jobs/{job_id}"
        )
    jobs = await d.admin.replay_dead_letters([letter.seq])
    audit(request, "replay", dead_letters=[letter.seq], job_ids=[job.id for job in jobs])
    said = f"Replayed dead letter #{letter.seq}: {job_id} runs again, from attempt 1."
    return said, link(request, f"/jobs/{job_id}")


routes = [
    Route("/job", search, methods=["GET"], name="job_search"),
    Route("/jobs/{job_id}", job_page, methods=["GET"], name="job"),
    Route("/jobs/{job_id}/cancel", cancel, methods=["POST"], name="job_cancel"),
    Route("/jobs/{job_id}/retry", retry, methods=["POST"], name="job_retry"),
    Route("/jobs/{job_id}/replay", replay, methods=["POST"], name="job_replay"),
]
