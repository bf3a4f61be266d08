"""What a producer asks about its jobs: results, status, cancel (``App`` and ``Job`` delegate here).

Results are read from the jobs bucket, which producers may read. Status and cancel need the
job stream, which a producer may neither read nor change: they are questions to the app's
workers (:mod:`jsworker._runtime.questions`), answered by whichever worker gets them. When no
worker runs, the caller does the work itself, which only a user allowed to read the job
stream (an operator, or a server without permissions) can.
"""

from __future__ import annotations

import contextlib
import json
import weakref
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

from .._errors import JobCancelled, JobExpired, JobFailed, JobNotFound, JsworkerError, PermissionDeniedError
from ..jetstream.connection import Connection
from ..jetstream.service import NobodyAnswered, ask
from .bucket import RECORDS_SINCE
from .cancel import cancel_job
from .lookup import job_status
from .state import Form, JobRecord, JobState, JobStatus
from .waiter import ResultWaiter

if TYPE_CHECKING:
    from .._core.view import AppView


T = TypeVar("T")
# States in which a job has a message in the stream: its sequence names this run.
_IN_STREAM = frozenset({JobState.QUEUED, JobState.RUNNING, JobState.RETRYING, JobState.SNOOZED})


class JobLifecycle:
    """An app's view of its jobs after enqueue, on the app's producer connections."""

    def __init__(self, app: AppView) -> None:
        self.app = app
        self._waiters: weakref.WeakKeyDictionary[Connection, ResultWaiter] = weakref.WeakKeyDictionary()

    async def _connection(self, feature: str) -> Connection:
        conn = await self.app.connections.connection()
        conn.require_version(feature, RECORDS_SINCE)
        return conn

    async def result(self, job_id: str, seq: int | None, timeout: float | None) -> Any:
        """The return value of job ``job_id``, waiting up to ``timeout`` seconds for it (see
        :meth:`Job.aresult <jsworker.Job.aresult>`). ``seq`` is the sequence of the job's
        message a receipt names (0 for a delayed job: its schedule's is not the job's); None
        for a handle made from the id alone."""
        conn = await self._connection("job results")
        waiter = self._waiters.get(conn)
        if waiter is None:
            waiter = self._waiters[conn] = ResultWaiter(conn, self.app.namespace)
        if seq is None:
            # A handle names the job's message while there is one: a unique job's earlier run
            # left a record under the same id.
            status = await self.status(job_id)
            seq = status.seq or 0 if status.state in _IN_STREAM else 0
            if status.state is JobState.UNKNOWN:
                raise JobNotFound(
                    f"no job {job_id} in app {self.app.name}: never enqueued, or its record is "
                    "gone (expired, or its task does not keep results)"
                )
        return self._value(job_id, await waiter.wait(job_id, seq, timeout))

    def _value(self, job_id: str, record: JobRecord) -> Any:
        if record.state is JobState.SUCCEEDED:
            value = record.result(self.app.serializer)
            # Given back as its task's return annotation says, whichever handle asks: the
            # record names the task, an id alone does not.
            task = self.app.tasks.get(record.task)
            return value if task is None else task.given_back(value)
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

    async def status(self, job_id: str, form: Form | None = None) -> JobStatus:
        """The status of ``job_id`` (see :meth:`App.astatus <jsworker.App.astatus>`), limited
        to ``form`` when given (see :data:`~.lookup.Form`)."""
        conn = await self._connection("job status")
        if not self.app.connection.authenticated:
            # No credentials, no permissions to narrow the reads: reading the server directly
            # takes one round trip where a worker's answer takes two (three with no worker).
            with contextlib.suppress(PermissionDeniedError):
                return await job_status(self.app, conn, job_id, form)
        answer = await self._ask(conn, "status", job_id, (form or "").encode())
        if answer is not None:
            return JobStatus.from_dict(answer)
        return await self._itself("read the status of", job_id, job_status(self.app, conn, job_id, form))

    async def cancel(self, job_id: str) -> bool:
        """Cancel ``job_id`` (see :meth:`App.acancel <jsworker.App.acancel>`)."""
        conn = await self.app.connections.connection()
        answer = await self._ask(conn, "cancel", job_id, b"")
        if answer is not None:
            return bool(answer)
        return await self._itself("cancel", job_id, cancel_job(self.app, conn, job_id))

    async def _ask(self, conn: Connection, question: str, job_id: str, body: bytes) -> Any:
        """The workers' answer to ``question`` about ``job_id``; None when no worker runs."""
        subject = self.app.namespace.ask_subject(question, job_id)
        try:
            raw = await ask(conn, subject, body, self.app.options.publish_timeout)
        except NobodyAnswered:
            return None
        except TimeoutError as exc:
            raise JsworkerError(f"cannot {question} job {job_id}: {exc}") from None
        doc = json.loads(raw)
        if "error" in doc:
            raise JsworkerError(f"cannot {question} job {job_id}: {doc['error']}")
        return doc["value"]

    async def _itself(self, what: str, job_id: str, work: Awaitable[T]) -> T:
        try:
            return await work
        except PermissionDeniedError as exc:
            raise JsworkerError(
                f"cannot {what} job {job_id}: no worker of app {self.app.name} is running to do it, "
                f"and this user may not do it itself ({exc})"
            ) from None
