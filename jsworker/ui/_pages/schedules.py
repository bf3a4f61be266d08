"""Periodic schedules (``/schedules``): name, task, expression, zone, next run; trigger now,
pause, resume, remove; and a schedule made here, or changed, where the code declares none of
that name."""

from __future__ import annotations

import json
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..._errors import JsworkerError, ScheduleNotFound
from ..._wire.names import validate_name
from .._errors import refuse
from .._web import Dashboard, action, audit, field, link, page, render


@page
async def schedules_page(request: Request, d: Dashboard) -> Response:
    """Every schedule on the server with its next run; the form filled with one of them
    (``?edit=<name>``) to change it."""
    found = await d.admin.schedules()
    editing = field(request.query_params, "edit")
    edited = next((s for s in found if s.name == editing and not s.declared), None)
    return render(
        request,
        "schedules.html",
        nav="schedules",
        schedules=found,
        tasks=sorted(d.app.tasks),
        edited=edited,
        edited_args=_arguments(edited.body) if edited is not None else "[]",
    )


def _arguments(body: bytes) -> str:
    """A schedule's arguments as the form shows them: its JSON body's ``args``."""
    try:
        doc = json.loads(body)
    except ValueError:
        return "[]"
    args = doc.get("args") if isinstance(doc, dict) else doc
    return json.dumps(args if isinstance(args, list) else [])


def _json(form: FormData, name: str, kind: type, default: str) -> Any:
    text = field(form, name) or default
    try:
        value = json.loads(text)
    except ValueError:
        raise refuse(400, f"{name} must be JSON: {text[:60]!r} is not") from None
    if not isinstance(value, kind):
        raise refuse(400, f"{name} must be a JSON {'array' if kind is list else 'object'}")
    return value


@action
async def put(request: Request, d: Dashboard, form: FormData) -> tuple[str, str]:
    """Creates or changes the schedule the form describes (one the code does not declare)."""
    name = validate_name("schedule", field(form, "name") or "")
    every_text = field(form, "every") or ""
    try:
        every = float(every_text) if every_text else None
    except ValueError:
        raise refuse(400, f"every must be a number of seconds, not {every_text[:20]!r}") from None
    try:
        done = await d.admin.put_schedule(
            name,
            field(form, "task") or "",
            cron=field(form, "cron"),
            every=every,
            tz=field(form, "tz"),
            args=_json(form, "args", list, "[]"),
            kwargs=_json(form, "kwargs", dict, "{}"),
        )
    except (JsworkerError, TypeError) as exc:
        raise refuse(400, f"schedule {name} not saved: {exc}") from exc
    audit(request, "put_schedule", schedule=name, done=done)
    said = {"created": "Created schedule", "updated": "Changed schedule"}.get(
        done, "Nothing to change in schedule"
    )
    return f"{said} {name}.", link(request, "/schedules")


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
    Route("/schedules/put", put, methods=["POST"], name="schedule_put"),
    Route("/schedules/{name}/{verb}", act, methods=["POST"], name="schedule_action"),
]
