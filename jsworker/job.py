"""What callers get back from an enqueue, and what a running task can learn about its job."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .errors import ConfigurationError, JsworkerError

if TYPE_CHECKING:
    from .app import App
    from .lifecycle.state import JobStatus


@dataclass(frozen=True, slots=True)
class Job:
    """Receipt for an enqueued job, and a handle on it: its result, status and cancel.

    ``duplicate`` is True when the server already held a job with this id inside its dedup
    window, or, for a unique task, a job with the same key that is scheduled, queued or
    running: nothing new was stored and ``id`` and ``seq`` name that job.
    ``scheduled_for`` is when a delayed job becomes runnable (UTC), None for a job that can
    run now; ``seq`` is then the sequence of its schedule, not of the job it fires.
    A handle from :meth:`App.job <jsworker.App.job>` knows only the id (``task`` and
    ``queue`` empty, ``seq`` 0).
    """

    id: str
    task: str
    queue: str
    seq: int
    duplicate: bool = False
    scheduled_for: datetime | None = None
    app: App | None = field(default=None, repr=False, compare=False)

    @property
    def from_id(self) -> bool:
        """True for a handle made from an id alone (:meth:`App.job <jsworker.App.job>`)."""
        return self.seq == 0 and not self.task

    def _owner(self) -> App:
        if self.app is None:
            raise JsworkerError(f"job {self.id}: this receipt was made without its app")
        return self.app

    async def aresult(self, timeout: float | None = None) -> Any:
        """Wait for the job to finish and return what its task returned.

        Raises :class:`~jsworker.JobFailed` when it was dead-lettered (with the error),
        :class:`~jsworker.JobCancelled` when it was cancelled (:class:`~jsworker.JobExpired`
        when it expired), ``TimeoutError`` after ``timeout`` seconds (None: wait as long as it
        takes) and :class:`~jsworker.JobNotFound` for a handle whose id names no job. The
        task must keep results (``store_result=True`` or ``App(results=True)``).
        """
        app = self._owner()
        task = app.tasks.get(self.task)
        if task is not None and not task.options.store_result:
            raise ConfigurationError(
                f"task {self.task} keeps no results: declare it with store_result=True "
                "(or App(results=True)) to wait for them"
            )
        return await app.lifecycle.result(self, timeout)

    def result(self, timeout: float | None = None) -> Any:
        """Sync form of :meth:`aresult`."""
        app = self._owner()
        return app.producer.run_sync(self.aresult, timeout)

    async def astatus(self) -> JobStatus:
        """The job's status now (see :meth:`App.astatus <jsworker.App.astatus>`)."""
        return await self._owner().lifecycle.status(self.id)

    def status(self) -> JobStatus:
        """Sync form of :meth:`astatus`."""
        return self._owner().producer.run_sync(self.astatus)

    async def acancel(self) -> bool:
        """Cancel the job (see :meth:`App.acancel <jsworker.App.acancel>`)."""
        return await self._owner().lifecycle.cancel(self.id)

    def cancel(self) -> bool:
        """Sync form of :meth:`acancel`."""
        return self._owner().producer.run_sync(self.acancel)


@dataclass(frozen=True, slots=True)
class JobContext:
    """The job a task is running for, as returned by :func:`current_job`.

    ``attempt`` starts at 1 and counts deliveries by the server, so a job whose worker crashed
    comes back with a higher attempt too. ``seq`` is the stream sequence of the job's message:
    the same on every attempt, new for each job even where the id comes back (a unique task's
    next job, an explicit id reused later). Make side effects idempotent with
    :attr:`idempotency_key`. ``enqueued_at`` is when the producer enqueued the job (unix
    seconds, the producer's clock; the same on every attempt), None when the message does not
    say (a hand-made one). ``headers`` are the message's headers as delivered.
    ``scheduled_for`` is when a delayed job was due or a periodic schedule ticked (UTC), None
    for a job enqueued to run at once. ``cancelled`` turns True when the job is cancelled while
    it runs: an async task is cancelled for it, a sync one (a thread cannot be interrupted)
    should check it between steps and return.
    """

    id: str
    task: str
    queue: str
    attempt: int
    max_retries: int
    enqueued_at: float | None
    headers: Mapping[str, str] = field(default_factory=dict)
    scheduled_for: datetime | None = None
    seq: int = 0
    is_cancelled: Callable[[], bool] = field(default=lambda: False, repr=False, compare=False)

    @property
    def idempotency_key(self) -> str:
        """``<id>-<seq>``: the same on every attempt of this job, and different for every other
        job, those that reuse its id included. ``id`` alone comes back for each job of a unique
        task's key."""
        return f"{self.id}-{self.seq}"

    @property
    def cancelled(self) -> bool:
        """True once the job has been cancelled (``app.cancel``) while it runs."""
        return self.is_cancelled()

    @property
    def is_last_attempt(self) -> bool:
        """True when a failure now would dead-letter the job instead of retrying it."""
        return self.attempt > self.max_retries


# Holds how to build the running job's JobContext rather than the context itself: most jobs
# never ask for it, and building one per job is a measurable part of a short job's cost.
running_job: ContextVar[Callable[[], JobContext] | None] = ContextVar("jsworker_current_job", default=None)
"""Set by the worker around each job run: what :func:`current_job` and the log processor read."""


def current_job() -> JobContext:
    """Return the job the calling task is running for.

    Works in async tasks and in sync tasks (their thread gets the job's context). Raises
    :class:`JsworkerError` when called outside a task run by a worker.
    """
    source = running_job.get()
    if source is None:
        raise JsworkerError("current_job() called outside a job run by a jsworker worker")
    return source()
