"""Celery's ``AsyncResult``, for code ported from it: a job's state in Celery's names, its
result and its revoke, each one call of jsworker's handle on the job (:class:`~jsworker.Job`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._core.job_status import JobState
from .._errors import JobCancelled, JobFailed
from .calls import check_job_id
from .receipt import Job

if TYPE_CHECKING:
    from .._core.view import AppView

# Celery's names for where a job is. No record of it reads as PENDING, as Celery's unknown id does.
_CELERY_STATES = {
    JobState.SCHEDULED: "PENDING",
    JobState.QUEUED: "PENDING",
    JobState.UNKNOWN: "PENDING",
    JobState.RUNNING: "STARTED",
    JobState.RETRYING: "RETRY",
    JobState.SNOOZED: "RETRY",
    JobState.SUCCEEDED: "SUCCESS",
    JobState.FAILED: "FAILURE",
    JobState.CANCELLED: "REVOKED",
    JobState.EXPIRED: "REVOKED",
}
_READY = frozenset({"SUCCESS", "FAILURE", "REVOKED"})


class AsyncResult:
    """Celery's ``AsyncResult(id)`` on ``job``: :attr:`state` in Celery's names,
    :meth:`get` for the result, :meth:`revoke` to cancel. Sync, as Celery's is: async code
    awaits the job's own ``aresult``, ``astatus`` and ``acancel`` (``app.job(id)``)."""

    def __init__(self, job: Job) -> None:
        #: jsworker's handle on the job.
        self.job = job

    @classmethod
    def of(cls, app: AppView, job_id: str) -> AsyncResult:
        """The AsyncResult of job ``job_id`` of ``app``, as ``app.AsyncResult(job_id)``."""
        return cls(Job(id=check_job_id(job_id), task="", queue="", seq=0, app=app))

    def __repr__(self) -> str:
        return f"<AsyncResult: {self.id}>"

    @property
    def id(self) -> str:
        """The job's id."""
        return self.job.id

    @property
    def state(self) -> str:
        """Where the job is, in Celery's names: ``PENDING`` (scheduled, queued, or no record
        of it), ``STARTED``, ``RETRY`` (retrying or snoozed), ``SUCCESS``, ``FAILURE`` or
        ``REVOKED`` (cancelled or expired). Each read asks the server."""
        return _CELERY_STATES[self.job.status().state]

    @property
    def status(self) -> str:
        """The same as :attr:`state`."""
        return self.state

    def ready(self) -> bool:
        """True once the job ended: SUCCESS, FAILURE or REVOKED."""
        return self.state in _READY

    def successful(self) -> bool:
        """True once the job succeeded."""
        return self.state == "SUCCESS"

    def failed(self) -> bool:
        """True once the job failed (dead-lettered)."""
        return self.state == "FAILURE"

    @property
    def result(self) -> Any:
        """What the job returned once it succeeded, else None (its error is :meth:`get`'s)."""
        return self.job.result() if self.successful() else None

    def get(self, timeout: float | None = None, propagate: bool = True) -> Any:
        """Wait for the job and return what it returned (``job.result(timeout)``). Its failure
        (:class:`~jsworker.JobFailed`) or cancel (:class:`~jsworker.JobCancelled`) is raised,
        or with ``propagate=False`` returned. ``TimeoutError`` after ``timeout`` seconds."""
        try:
            return self.job.result(timeout)
        except (JobFailed, JobCancelled) as exc:
            if propagate:
                raise
            return exc

    def revoke(self) -> bool:
        """Cancel the job (``job.cancel()``): True when it now never runs (again)."""
        return self.job.cancel()
