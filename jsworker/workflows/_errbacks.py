"""What an error callback is given when a workflow fails: the failure's details, a dict, first
in its arguments; or, for an errback Celery-style (its function's first parameters
``request, exc, traceback``), those details as Celery gives them: the failed job's request,
its exception and its traceback."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._core.job_status import JobError
from .._errors import JobFailed
from ._definition import FlowDef, step_id


def failure_details(flow: FlowDef, index: int, reason: str, error: BaseException | None) -> dict[str, Any]:
    """The details of step ``index`` of ``flow`` failing for ``reason``: the workflow
    (``flow``), the step (its index), the failed job (``job_id``) and its ``task``, the
    ``reason``, and the exception it raised (``error_type``, ``error_message``,
    ``traceback``; None when it raised none: bad input, a job that killed its workers)."""
    step = flow.steps[index]
    label = str(index) if flow.kind == "chain" else f"m{index}"
    kept = JobError.of(error) if error is not None else None
    return {
        "flow": flow.id,
        "step": index,
        "job_id": step.get("job_id") or step_id(flow.id, label),
        "task": step["task"],
        "reason": reason,
        "error_type": kept.type if kept is not None else None,
        "error_message": kept.message if kept is not None else None,
        "traceback": kept.traceback if kept is not None else None,
    }


@dataclass(frozen=True, slots=True)
class FailedRequest:
    """The failed job as a Celery-style errback's ``request`` names it: its ``id`` and
    ``task``. ``args`` and ``kwargs`` are empty: the failure's details do not repeat the
    job's arguments, which would make the error callback's job as large as the failed one."""

    id: str
    task: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


def celery_failure(args: list[Any]) -> list[Any]:
    """The arguments of an errback Celery-style: the failure's details first in ``args``
    made ``request`` (:class:`FailedRequest`), ``exc`` (:class:`~jsworker.JobFailed` with
    the failure's type, message and traceback) and ``traceback`` (the text, or None).
    ``args`` as they are when they do not start with details (an immutable errback, a job
    made by hand)."""
    if not args or not isinstance(args[0], Mapping) or "flow" not in args[0]:
        return args
    details = args[0]
    job_id, trace = str(details.get("job_id") or ""), details.get("traceback")
    exc = JobFailed(
        job_id,
        str(details.get("reason") or "failed"),
        details.get("error_type"),
        details.get("error_message"),
        trace,
    )
    return [FailedRequest(job_id, str(details.get("task") or "")), exc, trace, *args[1:]]
