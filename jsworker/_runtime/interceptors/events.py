"""Job events (``App(events=True)``): ``started`` as a run begins (``around_run``), and what
ended it once the server was told (``after_settled``): see :mod:`jsworker.events`."""

from __future__ import annotations

import time

from ...events._emit import EventEmitter
from ..execution import JobRun
from ..outcomes import NOT_STARTED, Outcome, OutcomeKind, Settlement, Verb
from ..pipeline import CallNext, Interceptor

# Outcomes that end no run, of which no event tells.
_NO_END = (OutcomeKind.SKIPPED, OutcomeKind.ABORTED, OutcomeKind.SNOOZED, OutcomeKind.LEFT)


class JobEvents(Interceptor):
    """Publishes the events of each run."""

    name = "events"

    def __init__(self, events: EventEmitter) -> None:
        self._events = events

    async def around_run(self, job: JobRun, call_next: CallNext) -> Outcome:
        """Publish ``started`` for a run that passed its checks, then run it."""
        events = self._events
        now = time.time()
        enqueued_at = job.enqueued_at
        await events.emit(
            "started", job.queue, job.task_label, job.job_id, ts=now, attempt=job.attempt,
            enqueued_at=enqueued_at, queue_wait=None if enqueued_at is None else max(0.0, now - enqueued_at),
        )  # fmt: skip
        return await call_next()

    async def after_settled(self, job: JobRun, settlement: Settlement) -> None:
        """Publish the events that close a run: ``succeeded``, or ``failed`` and then ``retried``
        or ``dead_lettered`` (a job that never started gets ``dead_lettered`` alone)."""
        events = self._events
        outcome, decision, duration = settlement.outcome, settlement.decision, settlement.duration
        queue, task, job_id, attempt = job.queue, job.task_label, job.job_id, job.attempt
        kind = outcome.kind
        if kind is OutcomeKind.SUCCEEDED:
            await events.emit("succeeded", queue, task, job_id, attempt=attempt, duration=duration)
            return
        if kind in _NO_END:
            # A cancel already told of itself; a snooze is no end (jsworker_jobs_snoozed counts it);
            # a delivery left to another's holder is not this job's end.
            return
        if kind is OutcomeKind.EXPIRED:
            await events.emit("expired", queue, task, job_id, attempt=attempt, reason=outcome.reason)
            return
        if kind not in NOT_STARTED:
            await events.emit(
                "failed", queue, task, job_id, attempt=attempt, duration=duration, outcome=kind.value,
                reason=outcome.reason,
            )  # fmt: skip
        if decision.verb is Verb.NAK:
            await events.emit("retried", queue, task, job_id, attempt=attempt, delay=decision.delay or 0.0)
        else:
            await events.emit(
                "dead_lettered",
                queue,
                task,
                job_id,
                attempt=attempt,
                outcome=kind.value,
                reason=decision.reason,
            )
