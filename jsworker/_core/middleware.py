"""Middleware: an app's own code around each enqueue and each run of its jobs.

A :class:`Middleware` overrides any of three hooks. ``on_enqueue`` runs in the caller's
thread (or task) before the job is sent, so what it reads from context variables (a trace,
a request id) is the caller's. ``around_run`` wraps the call of the task function in the
worker, async, sync (its thread) and ``executor="process"`` tasks alike. ``on_settled`` sees
how each delivery ended, after the server was told.

Only the hooks a middleware overrides are called: an app without middleware, or with none
that overrides a hook, pays nothing for it on the hot path.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from .._current import JobContext
from .._errors import ConfigurationError
from .._wire.headers import check_headers

#: What an enqueue sends: a job to run now, a delayed job, or a periodic schedule (once, when
#: it is declared: the headers added then ride with every tick it fires).
EnqueueKind = Literal["job", "delayed", "schedule"]
#: How a delivery of a job ended.
SettledState = Literal["succeeded", "retrying", "snoozed", "failed", "cancelled", "expired", "handed_back"]


@dataclass(slots=True)
class OutgoingJob:
    """A job about to be enqueued, as :meth:`Middleware.on_enqueue` sees it.

    ``headers`` start as the caller's own and may be added to or changed (names starting
    ``Nats-`` or ``Jsw-`` are refused, as for a caller's). ``args`` and ``kwargs`` are the
    arguments as they will be sent. ``due`` is when a delayed job runs (unix seconds), None
    for a job that runs now; ``schedule`` names the periodic schedule being declared.
    """

    id: str
    task: str
    queue: str
    kind: EnqueueKind
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    due: float | None = None
    schedule: str | None = None


@dataclass(frozen=True, slots=True)
class Settled:
    """How one delivery of a job ended, as :meth:`Middleware.on_settled` sees it.

    ``state`` is ``succeeded``; ``retrying`` (it runs again in ``retry_in`` seconds);
    ``snoozed`` (its task raised ``Snooze``: again in ``retry_in`` seconds, no attempt spent);
    ``failed`` (dead-lettered: ``reason`` says why); ``cancelled`` (on request, while this
    worker held it: in its buffer or running); ``expired`` (not started in time); or
    ``handed_back`` (the worker stopped while it ran: another worker runs it again, and this
    run counts as no attempt). A job that ends where no worker holds it (cancelled while
    delayed or queued) has no delivery to settle: ``@app.on_final_state`` hears it.
    ``value`` is what the task returned, ``error`` what it raised (None when it raised
    nothing), ``duration`` the seconds this delivery took in the worker.
    """

    state: SettledState
    reason: str = ""
    error: BaseException | None = None
    value: Any = None
    retry_in: float | None = None
    duration: float = 0.0


class Middleware:
    """Base class of middleware: override the hooks you need (each does nothing here).

    Listed in ``App(middleware=[...])``; the first is the outermost around a run and the first
    to see an enqueue.
    """

    def on_enqueue(self, job: OutgoingJob) -> None:
        """Called before ``job`` is sent, in the caller's thread; may change its headers.
        What it raises fails the enqueue with that error, and nothing is sent."""

    async def around_run(self, job: JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
        """Wrap the run of ``job``: ``await call_next()`` runs the task (and the middleware
        inside this one) and returns its value, or raises its error. What this returns is the
        job's value; an exception it raises counts as the job's own."""
        return await call_next()

    async def on_settled(self, job: JobContext, settled: Settled) -> None:
        """Called once the server was told how this delivery ended (see :class:`Settled`).
        What it raises is logged; the job is neither lost nor run again for it. At most once:
        a worker killed between the server's acknowledgement and this call never makes it
        (a table of final states that must be complete uses ``@app.on_final_state``)."""


def overrides(middleware: Middleware, hook: str) -> bool:
    """Whether ``middleware`` has its own ``hook`` (one it does not override is never called)."""
    return getattr(type(middleware), hook) is not getattr(Middleware, hook)


class MiddlewareChain(Sequence[Middleware]):
    """An app's middleware in order, with the ``on_enqueue`` hooks gathered up front (in the
    worker, each middleware is a stage of the job pipeline: see
    :mod:`jsworker._runtime.interceptors.middleware`)."""

    def __init__(self, middleware: Sequence[Middleware] = ()) -> None:
        items = tuple(middleware)
        for m in items:
            if not isinstance(m, Middleware):
                raise ConfigurationError(f"middleware must be Middleware instances, not {type(m).__name__}")
        self._items = items
        self._enqueue = [m.on_enqueue for m in items if overrides(m, "on_enqueue")]

    def __getitem__(self, index: Any) -> Any:
        return self._items[index]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Middleware]:
        return iter(self._items)

    @property
    def stamps(self) -> bool:
        """True when a middleware has an ``on_enqueue`` hook."""
        return bool(self._enqueue)

    def stamp(
        self,
        task: str,
        queue: str,
        job_id: str,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        headers: Mapping[str, str] | None,
        due: datetime | None,
        schedule: str | None = None,
    ) -> dict[str, str]:
        """Run every ``on_enqueue`` on the job these describe; its headers after them,
        checked as a caller's are."""
        kind: EnqueueKind = "schedule" if schedule is not None else "job" if due is None else "delayed"
        job = OutgoingJob(
            job_id, task, queue, kind, args, kwargs, dict(headers or {}),
            None if due is None else due.timestamp(), schedule,
        )  # fmt: skip
        for hook in self._enqueue:
            hook(job)
        try:
            return check_headers(job.headers)
        except ValueError as exc:
            raise ConfigurationError(f"task {task}: a middleware set bad headers: {exc}") from None
