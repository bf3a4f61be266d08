"""Cancels and expiry before a job starts: one cancelled while it waited in this worker's
buffer (:attr:`.jobbook.JobBook.cancelled`), or not started before its ``expires``, never
runs. A cancel that reaches a running job is the job book's (see :mod:`..jobbook`)."""

from __future__ import annotations

import time
from collections.abc import Awaitable

from ..._errors import JsworkerError
from ..._lifecycle.state import JobState
from ..._observability.logging import get_logger
from ..._wire.headers import EXPIRES_AT
from ..execution import JobRun
from ..jobbook import JobBook
from ..outcomes import Outcome, OutcomeKind
from ..pipeline import Interceptor

log = get_logger("jsworker.worker")

_EXPIRED = Outcome(OutcomeKind.EXPIRED, "not started before it expired")


class CancelsAndExpiry(Interceptor):
    """Why a job must not start (expired, or cancelled while it waited), or None; jobs that
    may have neither pay two look-ups."""

    name = "cancels-and-expiry"

    def __init__(self, book: JobBook) -> None:
        self._book = book
        self._cancelled = book.cancelled

    def admit(self, job: JobRun) -> Outcome | Awaitable[Outcome] | None:
        """``aborted`` for a job cancelled in the buffer, ``expired`` for one past its expiry."""
        cancelled = self._cancelled
        if cancelled and (job.job_id, job.delivery.stream_seq) in cancelled:
            job.cancel_requested = True
            return Outcome(OutcomeKind.ABORTED, "cancelled before it started")
        expires = job.delivery.headers.get(EXPIRES_AT)
        if expires is not None and expires.isdigit() and time.time() * 1000 > int(expires):
            if job.attempt > 1 and self._book.records:
                return self._expired_again(job)
            return _EXPIRED
        return None

    async def _expired_again(self, job: JobRun) -> Outcome:
        """An expired job delivered again: its expiry was counted already when its record
        says so (the acknowledgement that followed was lost), and is not counted twice."""
        try:
            record = await self._book.record_of(job)
        except JsworkerError as exc:
            log.warning("job.record_unread", error=str(exc), **job.log_fields())
            return _EXPIRED
        if record is not None and record.state is JobState.EXPIRED:
            return Outcome(OutcomeKind.SKIPPED, "expired already: counted at an earlier delivery")
        return _EXPIRED
