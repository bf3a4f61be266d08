"""One job (``/jobs/<id>``, found with the search box at ``/job?id=``): its state, attempts,
times, worker, headers, error with traceback; its payload and result after a click (never
with payloads off); cancel and retry now."""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ...calls import check_job_id
from ...jobstatus import JobState
from ...wire import CONTENT_TYPE
from ..errors import refuse
from ..payloads import readable
from ..web import Dashboard, action, audit, back, field, link, page, render

#: The states a cancel can still stop.
CANCELLABLE = {JobState.SCHEDULED, JobState.QUEUED, JobState.RUNNING, JobState.RETRYING, JobState.SNOOZED}
_SHOWABLE = {"payload", "result"}


@page
async def search(request: Request, d: Dashboard) -> Response:
    """The search box's target: the job's page."""
    given = field(request.query_params, "id")
    if given is None:
        return render(request, "search.html", nav="job")
    job_id = check_job_id(given)
    return RedirectResponse(link(request, f"/jobs/{job_id}"), status_code=303)


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
    return render(
        request,
        "job.html",
        nav="job",
        job=status,
        headers=sorted(message.headers.items()) if message is not None else None,
        size=message.size if message is not None else None,
        cancellable=status.state in CANCELLABLE,
        shown=shown,
        show=show,
    )


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


routes = [
    Route("/job", search, methods=["GET"], name="job_search"),
    Route("/jobs/{job_id}", job_page, methods=["GET"], name="job"),
    Route("/jobs/{job_id}/cancel", cancel, methods=["POST"], name="job_cancel"),
    Route("/jobs/{job_id}/retry", retry, methods=["POST"], name="job_retry"),
]
