"""How a worker settles a job off the common path: the task's retry policy, the verb sent
to the server (nak with a delay, or a dead letter then term), and the job's record.

The common path (a first success with no result to keep, or a kept result) stays in the
worker's loop; everything else comes here.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..deadletters.format import dead_letter_message
from ..errors import EnqueueError
from ..jetstream.connection import Connection
from ..jetstream.publish import Publisher
from ..observability.logging import get_logger
from .execution import JobRun
from .flows import FinalStep
from .handbacks import HandBacks
from .lifecycle import JobBook
from .settlement import LEAVE, Decision, Outcome, OutcomeKind, RetryPolicy, Verb, decide

if TYPE_CHECKING:
    from ..app import App

log = get_logger("jsworker.worker")

# Outcomes that settle a job for good without it having finished: a cancel of it, or a copy
# of a firing that must not run, is no run a later cancel could have come too late for.
_NOT_FINISHED = (OutcomeKind.ABORTED, OutcomeKind.SKIPPED, OutcomeKind.CANCELLED)
# How long a dead letter that could not be stored waits before the job is tried again.
_DLQ_RETRY_DELAY = 5.0


class Settler:
    """Settles the jobs of one worker that fail, retry, expire or succeed after retries."""

    def __init__(
        self,
        app: App,
        conn: Connection,
        book: JobBook,
        handbacks: HandBacks,
        finals: Sequence[FinalStep] = (),
    ) -> None:
        self.app = app
        #: Steps before a final outcome is sent (a workflow's end): see :mod:`.flows`.
        self._finals = tuple(finals)
        self.conn = conn
        self._book = book
        self._handbacks = handbacks
        self._dlq = Publisher(conn, retry_for=app.options.publish_timeout)
        self._policies: dict[str, RetryPolicy] = {}

    def _policy(self, job: JobRun) -> RetryPolicy:
        policy = self._policies.get(job.task_name)
        if policy is None:
            options = job.task.options if job.task else self.app.defaults
            policy = RetryPolicy(options.max_retries, options.retry_backoff, options.retry_backoff_max)
            if job.task is not None:  # names of undeclared tasks are not remembered
                self._policies[job.task_name] = policy
        return policy

    async def conclude(self, job: JobRun, outcome: Outcome, started: float) -> tuple[Outcome, Decision]:
        """Settle ``job`` with its record: a failure, a retry, an expiry, or a success after
        retries (which ends the ``retrying`` record); ``started`` is the run's
        ``time.monotonic()``. Returns the outcome and the decision."""
        if outcome.kind is OutcomeKind.LEFT:
            # Not this delivery's to settle, nor to record: the holder of an earlier one does.
            return outcome, LEAVE
        started = time.time() - (time.monotonic() - started)
        policy = self._policy(job)
        failures = job.failures or 0
        if job.attempt > 1 and outcome.kind not in _NOT_FINISHED:
            # Runs given back by stopping workers, those that crashed and snoozes were no
            # failures; the record keeps its count of failures and snoozes from run to run.
            await self._handbacks.read(job)
            failures = await self._book.read_failures(job)
        decision = decide(outcome, failures + 1, policy)
        if outcome.kind is OutcomeKind.SUCCEEDED:
            await self._book.record(job, outcome, decision, started)
            await job.delivery.ack()
            self._book.finished.append(job.delivery.stream_seq)
            return outcome, decision
        if self._finals and decision.verb is not Verb.NAK and outcome.kind is not OutcomeKind.CANCELLED:
            for final in self._finals:
                if not await final(job, outcome, decision):
                    # Not recorded where it had to be: the job ends later, when that works.
                    decision = Decision(Verb.NAK, _DLQ_RETRY_DELAY, f"end not recorded: {decision.reason}")
                    break
        decision = await self._settle(job, outcome, decision)
        await self._book.record(job, outcome, decision, started)
        if decision.verb is not Verb.NAK and outcome.kind not in _NOT_FINISHED:
            self._book.finished.append(job.delivery.stream_seq)
        return outcome, decision

    async def _settle(self, job: JobRun, outcome: Outcome, decision: Decision) -> Decision:
        """Tell the server ``decision``; returns what was done, which differs when a dead
        letter could not be stored (then the job comes back later instead)."""
        delivery = job.delivery
        if decision.verb is Verb.ACK:
            await delivery.ack()
        elif outcome.kind is OutcomeKind.CANCELLED:
            await self._handbacks.give_back([delivery])  # the worker is stopping
        elif decision.verb is Verb.NAK:
            await delivery.nak(decision.delay)
        elif await self._store_dead_letter(job, outcome, decision.reason):
            # Stored first, then terminated: a crash in between redelivers instead of losing.
            await delivery.term(decision.reason)
        else:
            # Reported (and counted) as a retry, never as a dead letter that does not exist.
            await delivery.nak(_DLQ_RETRY_DELAY)
            return Decision(Verb.NAK, _DLQ_RETRY_DELAY, f"dead letter not stored: {decision.reason}")
        return decision

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
