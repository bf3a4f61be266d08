"""The job messages of a workflow's steps, on the producer's side and the worker's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._enqueue.by_name import named_task
from .._enqueue.calls import Call, due_time
from ..jetstream.message import OutMessage
from ._definition import FLOW, FLOW_STEP, step_id

if TYPE_CHECKING:
    from .._enqueue.task import Task, TaskOwner


def step_task(app: TaskOwner, described: Mapping[str, Any]) -> Task[Any, Any]:
    """The task a described step runs: the app's own, or one known only by its name (its
    workers know it)."""
    name, queue = described["task"], described["queue"]
    task = app.tasks.get(name)
    return task if task is not None else named_task(app, name, queue)


def step_message(
    app: TaskOwner,
    flow_id: str,
    step: str,
    described: Mapping[str, Any],
    given: Sequence[Any] = (),
    headers: Mapping[str, str] | None = None,
) -> OutMessage:
    """The job of ``step`` of workflow ``flow_id`` running ``described``, with ``given``
    (the previous result, or an error's details) before its own arguments unless it is
    immutable, and ``headers`` (the caller's own, carried from step to step) under its own."""
    task = step_task(app, described)
    args = tuple(described["args"]) if described.get("immutable") else (*given, *described["args"])
    queue = described["queue"] if described["queue"] != task.queue else None
    own = {**(headers or {}), **described.get("headers", {})}
    countdown = described.get("countdown")
    due = due_time(countdown, None) if countdown is not None else None
    job_id = described.get("job_id") or step_id(flow_id, step)
    kwargs = dict(described["kwargs"])
    if app.middleware.stamps:
        # Told of the step's job as of any other, under the id it runs with (where the job is
        # made: the starting process for a workflow's first steps, a worker for the next).
        own = app.middleware.stamp(task.name, queue or task.queue, job_id, args, kwargs, own, due)
    call = Call(args, kwargs, job_id, due, None, False, queue, own or None)
    msg = app.producer.message(task, call, spread=False)
    return OutMessage(msg.subject, msg.body, {**msg.headers, FLOW: flow_id, FLOW_STEP: step})
