"""What callers get back from an enqueue: a receipt that is also a handle on the job.

What a running task learns about its job is :mod:`jsworker._current`'s; :class:`JobContext`,
:func:`current_job` and ``running_job`` are importable from here too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .._current import JobContext as JobContext
from .._current import current_job as current_job
from .._current import running_job as running_job
from .._errors import ConfigurationError, JsworkerError

if TYPE_CHECKING:
    from .._core.job_status import JobStatus
    from .._core.view import AppView


@dataclass(frozen=True, slots=True)
class Job:
    """Receipt for an enqueued job, and a handle on it: its result, status and cancel.

    ``duplicate`` is True when the server already held a job with this id inside its dedup
    window, or, for a unique task, a job with the same key that is scheduled, queued or
    running: nothing new was stored and ``id`` and ``seq`` name that job.
    ``scheduled_for`` is when a delayed job becomes runnable (UTC), None for a job that can
    run now; ``seq`` is then the sequence of its schedule, not of the job it fires. For a job
    of a fair queue, ``seq`` is its message's in the queue's intake, where it waits its turn.
    A handle from :meth:`App.job <jsworker.App.job>` knows only the id (``task`` and
    ``queue`` empty, ``seq`` 0).
    """

    id: str
    task: str
    queue: str
    seq: int
    duplicate: bool = False
    scheduled_for: datetime | None = None
    app: AppView | None = field(default=None, repr=False, compare=False)

    @property
    def from_id(self) -> bool:
        """True for a handle made from an id alone (:meth:`App.job <jsworker.App.job>`)."""
        return self.seq == 0 and not self.task

    def _owner(self) -> AppView:
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
        seq: int | None = None  # a handle from the id alone: the lifecycle finds the message
        if not self.from_id:
            # A receipt names the very message of its job; a delayed job's names its schedule,
            # and that of a job for a fair queue its message in the queue's intake.
            waits_turn = self.queue in app.fair_queues
            seq = self.seq if self.scheduled_for is None and not waits_turn else 0
        return await app.lifecycle.result(self.id, seq, timeout)

    def result(self, timeout: float | None = None) -> Any:
        """Sync form of :meth:`aresult`."""
        app = self._owner()
        return app.bridge.run_sync(self.aresult, timeout)

    async def astatus(self) -> JobStatus:
        """The job's status now (see :meth:`App.astatus <jsworker.App.astatus>`)."""
        return await self._owner().lifecycle.status(self.id)

    def status(self) -> JobStatus:
        """Sync form of :meth:`astatus`."""
        return self._owner().bridge.run_sync(self.astatus)

    async def acancel(self) -> bool:
        """Cancel the job (see :meth:`App.acancel <jsworker.App.acancel>`)."""
        return await self._owner().lifecycle.cancel(self.id)

    def cancel(self) -> bool:
        """Sync form of :meth:`acancel`."""
        return self._owner().bridge.run_sync(self.acancel)
