"""Enqueueing a task by its name, without its code: an API process that should not import
the worker's task modules (and their dependencies) to enqueue.

What is checked then: the task and queue names, the job id, the timing and the headers, and
that the arguments encode. Not the arguments against the function's signature, nor their
types: the function is not at hand, so a mistake shows as a dead letter with the reason
when a worker runs the job. A task the app does declare goes through all its checks.

A dotted name (``documents.tasks.consume_file``, Celery's default name: the function's module
and name) names the declared task whose function that is: no task's own name has a dot.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .._errors import ConfigurationError
from .._wire.names import validate_name
from .task import Task, TaskOwner

# Why a task's name has no dot, for the errors that meet one.
_WHY_NO_DOTS = (
    "a task's name is a token of its jobs' NATS subjects (jsw.<app>.q.<queue>.<task>), which a dot splits"
)


def check_task_name(name: str) -> str:
    """``name`` if it can name a task (:func:`validate_name`); for a dotted one (Celery's
    ``module.function``), a ConfigurationError saying why not and what to do instead."""
    if "." in name:
        short = name.rsplit(".", 1)[-1]
        raise ConfigurationError(
            f"invalid task name {name!r}: {_WHY_NO_DOTS}. Name it {short!r} (or leave name= out): "
            f"send_task({name!r}) and enqueue_job({name!r}) still find it, by its function's "
            "module and name, in a process that imported it"
        )
    return validate_name("task", name)


def named_task(app: TaskOwner, name: str, queue: str | None = None) -> Task[..., Any]:
    """The task ``name`` of ``app``: the declared one if this process has it (a dotted name:
    the one whose function's module and name it is), else a stand-in that enqueues to
    ``queue`` (the app's default queue when None) and cannot run here."""
    declared = app.tasks.get(name)
    if declared is not None:
        return declared
    if "." in name:
        return _by_function(app, name)
    validate_name("task", name)
    options = app.defaults
    if queue is not None and validate_name("queue", queue) != options.queue:
        options = dataclasses.replace(options, queue=queue)

    def elsewhere(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"task {name} is not declared in this process: it runs on a worker")

    # Not registered with the app: a worker loading this app never takes it for its own.
    return Task(app, elsewhere, name, options)


def _by_function(app: TaskOwner, dotted: str) -> Task[..., Any]:
    """The declared task whose function is ``dotted`` (``module.qualname``, Celery's default
    task name); ConfigurationError naming the fixes when this process declares none."""
    for task in app.tasks.values():
        if f"{task.fn.__module__}.{task.fn.__qualname__}" == dotted:
            return task
    raise ConfigurationError(
        f"no task {dotted!r} in app {app.name}: {_WHY_NO_DOTS}, so a dotted name only finds a task "
        "this process declared, by its function's module and name. Import the module that declares "
        f"it here, or send it by its own name ({dotted.rsplit('.', 1)[-1]!r} unless declared with name=)"
    )
