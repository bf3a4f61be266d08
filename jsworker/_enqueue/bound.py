"""What a task's first parameter is given when its declaration asks for it: Celery's bound
task (``@app.task(bind=True)``: ``self.request.id``, ``raise self.retry(countdown=5)``) and
arq's ``ctx`` (``@app.task(ctx=True)``: ``ctx["job_id"]``, ``ctx["session"]``).

That parameter is no argument of the job: enqueues check and encode the parameters after it,
and the worker passes it when it calls the function. What it holds is read when asked, from
the running job (:func:`~jsworker.current_job`) and the app's ``state``, so the one object
made when the task is declared serves every job it runs.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from .._current import current_job
from .._errors import ConfigurationError, Reject, Retry
from .._wire.headers import caller_headers

#: What a task's first parameter is given: Celery's bound task, or arq's ``ctx``.
Given = Literal["bind", "ctx"]

_BY_POSITION = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class _Stateful(Protocol):
    @property
    def state(self) -> object: ...


@dataclass(frozen=True, slots=True)
class Request:
    """The running job as Celery's ``self.request`` names it: its ``id``, ``retries`` (runs
    before this one), ``task`` (its task's name) and ``headers`` (its caller's own)."""

    id: str
    retries: int
    task: str
    headers: Mapping[str, str]


class BoundTask:
    """Celery's ``self`` in a ``bind=True`` task: its ``name``, the running job as
    :attr:`request`, and :meth:`retry`."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<BoundTask {self.name}>"

    @property
    def request(self) -> Request:
        """The job being run (JsworkerError outside a job run by a worker)."""
        job = current_job()
        return Request(job.id, job.attempt - 1, job.task, caller_headers(job.headers))

    def retry(
        self, countdown: float | None = None, exc: BaseException | None = None, max_retries: int | None = None
    ) -> Retry | Reject:
        """What to raise to run the job again (``raise self.retry(countdown=5, exc=e)``): a
        :class:`~jsworker.Retry` after ``countdown`` seconds (None: the task's backoff), with
        ``exc`` as its cause and in its reason. It counts against the task's own
        ``max_retries``; ``max_retries`` here stops sooner: with that many retries made, a
        :class:`~jsworker.Reject` that dead-letters the job instead."""
        why = f": {type(exc).__name__}: {exc}" if exc is not None else ""
        control: Retry | Reject
        if max_retries is not None and current_job().attempt - 1 >= max_retries:
            control = Reject(f"max_retries={max_retries} reached{why}")
        else:
            control = Retry(delay=countdown, reason=f"retry requested{why}")
        if exc is not None:
            control.__cause__ = exc
        return control


class ArqContext(Mapping[str, Any]):
    """arq's ``ctx`` in a ``ctx=True`` task: ``job_id``, ``job_try`` (the attempt, from 1) and
    ``enqueue_time`` (UTC; None when the job does not say) of the running job, then every
    attribute the app's start hooks set on ``app.state`` (``ctx["session"]`` is
    ``app.state.session``). Read-only: what a start hook opens goes on ``app.state``."""

    _JOB = ("job_id", "job_try", "enqueue_time")

    def __init__(self, app: _Stateful) -> None:
        self._app = app

    def __getitem__(self, key: str) -> Any:
        if key in self._JOB:
            job = current_job()
            if key == "job_id":
                return job.id
            if key == "job_try":
                return job.attempt
            return None if job.enqueued_at is None else datetime.fromtimestamp(job.enqueued_at, UTC)
        return vars(self._app.state)[key]

    def __iter__(self) -> Iterator[str]:
        yield from self._JOB
        yield from (key for key in vars(self._app.state) if key not in self._JOB)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"<ArqContext {', '.join(self)}>"


def given_first(
    task: str, fn: Callable[..., Any], given: Given, app: _Stateful
) -> tuple[inspect.Signature, Callable[..., Any]]:
    """The signature of task ``task``'s arguments (``fn``'s after its first parameter) and
    what a worker calls with them (``fn`` given its first argument); ConfigurationError for a
    function with no first parameter to give."""
    signature = inspect.signature(fn)
    params = list(signature.parameters.values())
    if not params or params[0].kind not in _BY_POSITION:
        raise ConfigurationError(
            f"task {task}: {given}=True passes the function's first parameter "
            f"({'self' if given == 'bind' else 'ctx'}), and {getattr(fn, '__qualname__', fn)!s} has none "
            "taken by position"
        )
    first: BoundTask | ArqContext = BoundTask(task) if given == "bind" else ArqContext(app)
    return signature.replace(parameters=params[1:]), functools.partial(fn, first)
