"""Enqueueing a task by its name, without its code: an API process that should not import
the worker's task modules (and their dependencies) to enqueue.

What is checked then: the task and queue names, the job id, the timing and the headers, and
that the arguments encode. Not the arguments against the function's signature, nor their
types: the function is not at hand, so a mistake shows as a dead letter with the reason
when a worker runs the job. A task the app does declare goes through all its checks.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .._wire.names import validate_name
from .task import Task, TaskOwner


def named_task(app: TaskOwner, name: str, queue: str | None = None) -> Task[..., Any]:
    """The task ``name`` of ``app``: the declared one if this process has it, else a stand-in
    that enqueues to ``queue`` (the app's default queue when None) and cannot run here."""
    declared = app.tasks.get(name)
    if declared is not None:
        return declared
    validate_name("task", name)
    options = app.defaults
    if queue is not None and validate_name("queue", queue) != options.queue:
        options = dataclasses.replace(options, queue=queue)

    def elsewhere(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"task {name} is not declared in this process: it runs on a worker")

    # Not registered with the app: a worker loading this app never takes it for its own.
    return Task(app, elsewhere, name, options)
