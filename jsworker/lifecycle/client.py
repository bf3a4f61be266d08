"""What a producer asks about its jobs: results, status, cancel (``App`` and ``Job`` delegate here)."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from ..errors import JobCancelled, JobExpired, JobFailed, JobNotFound
from ..jetstream.connection import Connection
from .bucket import RECORDS_SINCE
from .cancel import cancel_job
from .lookup import current_message, job_status
from .state import JobRecord, JobState, JobStatus
from .waiter import ResultWaiter

if TYPE_CHECKING:
    from ..app import App
    from ..job import Job


class JobLifecycle:
    """An app's view of its jobs after enqueue, on the app's producer connections."""

    def __init__(self, app: App) -> None:
        self.app = app
        self._waiters: weakref.WeakKeyDictionary[Connection, ResultWaiter] = weakref.WeakKeyDictionary()

    async def _connection(self, feature: str) -> Connection:
        conn = await self.app.producer.connection()
        conn.require_version(feature, RECORDS_SINCE)
        return conn

    async def result(self, job: Job, timeout: float | None) -> Any:
        """The return value of ``job``, waiting up to ``timeout`` seconds for it (see
        :meth:`Job.aresult <jsworker.Job.aresult>`)."""
        conn = await self._connection("job results")
        waiter = self._waiters.get(conn)
        if waiter is None:
            waiter = self._waiters[conn] = ResultWaiter(conn, self.app.namespace)
        # A receipt names the very message of its job; a delayed job's names its schedule.
        seq = job.seq if job.scheduled_for is None else 0
        if job.from_id:
            # A handle names the job's message while there is one: a unique job's earlier run
            # left a record under the same id.
            message = await current_message(self.app, conn, job.id)
            seq = message.seq if message is not None else 0
            if message is None and (await job_status(self.app, conn, job.id)).state is JobState.UNKNOWN:
                raise JobNotFound(
                    f"no job {job.id} in app {self.app.name}: never enqueued, or its record is "
                    "gone (expired, or its task does not keep results)"
                )
        return self._value(job.id, await waiter.wait(job.id, seq, timeout))

    def _value(self, job_id: str, record: JobRecord) -> Any:
        if record.state is JobState.SUCCEEDED:
            return record.result(self.app.serializer)
        if record.state is JobState.CANCELLED:
            raise JobCancelled(job_id)
        if record.state is JobState.EXPIRED:
            raise JobExpired(job_id, "expired before it started")
        error = record.error
        raise JobFailed(
            job_id,
            record.reason or "failed",
            error.type if error else None,
            error.message if error else None,
            error.traceback if error else None,
        )

    async def status(self, job_id: str) -> JobStatus:
        """The status of ``job_id`` (see :meth:`App.astatus <jsworker.App.astatus>`)."""
        return await job_status(self.app, await self._connection("job status"), job_id)

    async def cancel(self, job_id: str) -> bool:
        """Cancel ``job_id`` (see :meth:`App.acancel <jsworker.App.acancel>`)."""
        conn = await self.app.producer.connection()
        return await cancel_job(self.app, conn, job_id)
