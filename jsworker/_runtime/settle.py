"""The settle stage (see :mod:`.pipeline`): from a job's outcome to what the server is told
and what its record says, as one :class:`~.outcomes.Settlement`.

Every outcome takes the same way: the decision from :func:`~.outcomes.decide` (the table of
outcomes and verbs), then the server told. The common case costs no more than it must: a
first success with no result to keep is acknowledged and nothing is written or read (it has
no record); a kept result's record is written and the job acknowledged once it is stored,
outside the run (see :meth:`~.jobbook.JobBook.keep_result`). A retry, a failure, an expiry or
a success after retries reads the job's record (its failures so far) and writes it again.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from .._deadletters.format import dead_letter_message
from .._errors import EnqueueError
from .._observability.logging import get_logger
from ..jetstream.connection import Connection
from ..jetstream.publish import Publisher
from .execution import JobRun
from .handbacks import HandBackCounts
from .jobbook import JobBook
from .outcomes import (
    STOPPED_WHILE_RUNNING,
    Decision,
    Outcome,
    OutcomeKind,
    RetryPolicy,
    Settlement,
    Verb,
    decide,
)

if TYPE_CHECKING:
    from .._app import App

log = get_logger("jsworker.worker")

#: A hook before a final outcome is sent (see :meth:`.pipeline.Interceptor.before_final`).
FinalHook = Callable[[JobRun, Settlement], Awaitable[bool]]

# Outcomes that settle a job for good without it having finished: a cancel of it, or a copy
# of a firing that must not run, is no run a later cancel could have come too late for.
_NOT_FINISHED = (OutcomeKind.ABORTED, OutcomeKind.SKIPPED, OutcomeKind.CANCELLED)
# Outcomes whose settlement reads no record.
_UNREAD = (*_NOT_FINISHED, OutcomeKind.LEFT)
# What decide() says of every success: neither the attempt nor the retry policy matters to it,
# so it is asked once, not per job.
_SUCCESS = decide(Outcome(OutcomeKind.SUCCEEDED), 1, RetryPolicy(0, 0.0, 0.0))
# How long a dead letter that could not be stored waits before the job is tried again.
_DLQ_RETRY_DELAY = 5.0


class Settle:
    """Settles the jobs of one worker: ``await settle(job, outcome)``."""

    def __init__(
        self,
        app: App,
        conn: Connection,
        book: JobBook,
        handbacks: HandBackCounts,
        finals: Sequence[FinalHook] = (),
    ) -> None:
        self.app = app
        self.conn = conn
        self._finals = tuple(finals)
        self._book = book
        self._finished = book.finished
        self._handbacks = handbacks
        self._dlq = Publisher(conn, retry_for=app.options.publish_timeout)
        self._policies: dict[str, RetryPolicy] = {}
        # Final states kept: every job's end has a record, stored before the server hears it.
        self._final_states = app.options.final_states and book.records

    def _policy(self, job: JobRun) -> RetryPolicy:
        policy = self._policies.get(job.task_name)
        if policy is None:
            options = job.task.options if job.task else self.app.defaults
            policy = RetryPolicy(options.max_retries, options.retry_backoff, options.retry_backoff_max)
            if job.task is not None:  # names of undeclared tasks are not remembered
                self._policies[job.task_name] = policy
        return policy

    def __call__(self, job: JobRun, outcome: Outcome) -> Settlement | Awaitable[Settlement]:
        """Decide how ``job`` ends after ``outcome``, tell the server, and keep its record; an
        awaitable of that when it takes more than queueing an ack (see :mod:`.pipeline`)."""
        if outcome.kind is OutcomeKind.SUCCEEDED and not job.cancel_requested:
            task = job.task
            assert task is not None  # only a known task's run succeeds
            kept = task.options.store_result
            if kept or self._final_states:
                # The record, then the ack once it is stored, outside this run (the job is
                # finished then, not before); a value that cannot be kept makes the run a
                # failure.
                outcome = self._book.keep_result(job, outcome, job.started, value_kept=kept)
                if outcome.kind is OutcomeKind.SUCCEEDED:
                    return Settlement(outcome, _SUCCESS, time.monotonic() - job.started)
            elif job.attempt == 1:
                # A first success: no record to read (it has no failures) nor to write.
                job.delivery.ack_soon()
                return self._succeeded(job, outcome)
        return self._settle(job, outcome)

    def _succeeded(self, job: JobRun, outcome: Outcome) -> Settlement:
        """The settlement of a success whose ack is sent."""
        # For a cancel that deleted the message just before the ack reached the server.
        self._finished.append(job.place)
        return Settlement(outcome, _SUCCESS, time.monotonic() - job.started)

    async def _settle(self, job: JobRun, outcome: Outcome) -> Settlement:
        """Settle ``job`` with its record: a failure, a retry, an expiry, a cancel, a job left
        to another delivery, or a success after retries (which ends its ``retrying``
        record)."""
        if job.cancel_requested and outcome.kind is not OutcomeKind.ABORTED:
            # Whatever the run came to (a sync task may even have returned), it was cancelled.
            outcome = Outcome(OutcomeKind.ABORTED, STOPPED_WHILE_RUNNING)
        kind = outcome.kind
        failures = 0
        if job.attempt > 1 and kind not in _UNREAD:
            # Runs given back by stopping workers, those that crashed and snoozes were no
            # failures; the record keeps its count of failures and snoozes from run to run.
            await self._handbacks.read(job)
            failures = await self._book.read_failures(job)
        decision = decide(outcome, failures + 1, self._policy(job))
        if kind is OutcomeKind.SUCCEEDED:
            await self._book.record(job, outcome, decision, self._wall(job))
            await job.delivery.ack()
            return self._succeeded(job, outcome)
        if decision.verb is not Verb.LEAVE:
            # (A delivery left is not this one's to settle, nor to record: the holder of an
            # earlier one does.)
            decision = await self._not_succeeded(job, outcome, decision)
        return Settlement(outcome, decision, time.monotonic() - job.started)

    async def _not_succeeded(self, job: JobRun, outcome: Outcome, decision: Decision) -> Decision:
        """Settle a job that did not succeed: what must come before a final verb (the
        interceptors' part, its dead letter), then the verb and the record; returns what was
        done."""
        kind = outcome.kind
        if self._finals and decision.verb is not Verb.NAK and kind is not OutcomeKind.CANCELLED:
            for final in self._finals:
                if not await final(job, Settlement(outcome, decision)):
                    # Not recorded where it had to be: the job ends later, when that works.
                    decision = Decision(Verb.NAK, _DLQ_RETRY_DELAY, f"end not recorded: {decision.reason}")
                    break
        if decision.verb is Verb.DEAD_LETTER and not await self._store_dead_letter(
            job, outcome, decision.reason
        ):
            # Reported (and counted) as a retry, never as a dead letter that does not exist.
            decision = Decision(Verb.NAK, _DLQ_RETRY_DELAY, f"dead letter not stored: {decision.reason}")
        if outcome.held:
            # Given back unrun by a limit: counted before it goes back, or its next delivery
            # would take this one for a run that ended with no outcome, and a few of those in
            # a row (a records bucket electing its leader) for a job that kills its workers.
            # Counted in its record; where that cannot be written, as a stopping worker's
            # hand-back is.
            if not await self._book.record(job, outcome, decision, self._wall(job)):
                await self._handbacks.count([job.delivery])
            await self._tell(job, outcome, decision)
        elif self._final_states and decision.verb is not Verb.NAK:
            # The record before the final verb: a worker that dies in between leaves the job
            # to run again, never ended with no record of how (final-state handlers read it).
            await self._book.record(job, outcome, decision, self._wall(job))
            await self._tell(job, outcome, decision)
        else:
            # The server told first: the record is for readers of the status, who can wait.
            await self._tell(job, outcome, decision)
            await self._book.record(job, outcome, decision, self._wall(job))
        if decision.verb is not Verb.NAK and kind not in _NOT_FINISHED:
            self._finished.append(job.place)
        return decision

    @staticmethod
    def _wall(job: JobRun) -> float:
        """When ``job`` was taken up, in unix seconds."""
        return time.time() - (time.monotonic() - job.started)

    async def _tell(self, job: JobRun, outcome: Outcome, decision: Decision) -> None:
        """Tell the server ``decision`` (a dead letter's is stored by now: a crash before its
        term redelivers the job instead of losing it)."""
        delivery = job.delivery
        if decision.verb is Verb.ACK:
            await delivery.ack()
        elif outcome.kind is OutcomeKind.CANCELLED:
            await self._handbacks.give_back([delivery])  # the worker is stopping
        elif decision.verb is Verb.NAK:
            await delivery.nak(decision.delay)
        else:
            await delivery.term(decision.reason)

    async def _store_dead_letter(self, job: JobRun, outcome: Outcome, reason: str) -> bool:
        d = job.delivery
        msg = dead_letter_message(
            self.app.namespace,
            subject=d.subject,
            body=d.body,
            headers=d.headers,
            job_id=job.job_id,
            task=job.task_name,
            queue=job.queue,
            attempt=job.attempt - job.handed_back,
            reason=reason,
            error=outcome.error,
            max_payload=self.conn.max_payload,
        )
        try:
            await self._dlq.publish(msg)
            return True
        except EnqueueError as exc:
            log.error("job.dead_letter_failed", error=str(exc), **job.log_fields())
            return False
