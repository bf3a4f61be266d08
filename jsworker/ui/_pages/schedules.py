"""Periodic schedules (``/schedules``): name, task, expression, zone, next run; trigger now,
pause, resume, remove."""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..._errors import ScheduleNotFound
from ..._wire.names import validate_name
from .._errors import refuse
from .._web import Dashboard, action, audit, link, page, render


@page
async def schedules_page(request: Request, d: Dashboard) -> Response:
    """Every schedule on the server with its next run."""
    found = await d.admin.schedules()
    return render(request, "schedules.html", nav="schedules", schedules=found)


@action
async def act(request: Request, d: Dashboard, form: FormData) -> tuple[str, str]:
    """Trigger, pause, resume or remove one schedule."""
    name = validate_name("schedule", request.path_params["name"])
    verb = request.path_params["verb"]
    try:
        if verb == "trigger":
            job = await d.admin.trigger_schedule(name)
            audit(request, "trigger_schedule", schedule=name, job_ids=[job.id])
            return f"Triggered {name}: job {job.id}.", link(request, "/schedules")
        if verb == "pause":
            changed = await d.admin.pause_schedule(name)
        elif verb == "resume":
            changed = await d.admin.resume_schedule(name)
        elif verb == "remove":
            changed = await d.admin.remove_schedule(name)
        else:
            raise refuse(404, f"no such action on a schedule: {verb[:40]!r}")
    except ScheduleNotFound as exc:
        raise refuse(404, str(exc)) from exc
    audit(request, f"{verb}_schedule", schedule=name, changed=changed)
    past = {"pause": "Paused", "resume": "Resumed", "remove": "Removed"}[verb]
    return (f"{past} {name}." if changed else f"{name}: nothing to {verb}."), link(request, "/schedules")


routes = [
    Route("/schedules", schedules_page, methods=["GET"], name="schedules"),
    Route("/schedules/{name}/{verb}", act, methods=["POST"], name="schedule_action"),
]
