"""The worker's book of its jobs: cancels it hears of (before a job starts, and while it
runs), who holds a job, the jobs it settled, and each job's record (result or state).

A cancel reaches the worker holding the job as a question on ``jsw.<app>.halt.<job id>``
carrying the message's stream sequence (see :mod:`jsworker._lifecycle.cancel`). The worker
acts on it only once the server confirms the message is gone (deleted by a cancel, or
settled): a notice alone never makes it drop or stop a job. It then answers what it did:
dropped it unstarted, stopped it running, or had already finished it.

A job whose task keeps no results and that succeeds on its first attempt has no record:
the settle stage (:mod:`.settle`) writes none for it. A cancel heard of while the job waited
in the buffer, and the job's expiry, are checked before it starts by
:mod:`.interceptors.cancels`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import socket
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from .._core.job_status import MAX_MESSAGE
from .._errors import EnqueueError, JsworkerError, StalledError
from .._lifecycle.bucket import BATCHED_SINCE, RECORDS_SINCE, Records, record_message, ttl_headers
from .._lifecycle.cancel import DROPPED, FINISHED, STOPPED
from .._lifecycle.state import JobError, JobRecord, JobState, SuccessRecords
from .._observability.logging import get_logger
from .._wire.names import parse_place
from ..jetstream.acked import AckedPublisher
from ..jetstream.connection import Connection
from ..jetstream.delivery import Delivery
from ..jetstream.limits_stream import LimitsStream
from ..jetstream.message import OutMessage
from ..jetstream.service import Serving
from .execution import JobRun
from .outcomes import Decision, Outcome, OutcomeKind, Verb, is_failure
from .questions import serve_app

if TYPE_CHECKING:
    from .._app import App

log = get_logger("jsworker.worker")

# Cancels remembered for jobs this worker may still hold in its buffer (their message is gone
# from the server, the copy in hand is not); a buffer holds at most a few hundred.
_REMEMBERED_CANCELS = 4096
# Stream sequences of the jobs this worker settled for good, newest last: a cancel that
# deleted a job's message just before its ack arrived learns here that it came too late. A
# cancel asks within milliseconds of the delete; this covers a quarter second of a worker
# finishing 60,000 jobs a second.
_REMEMBERED_FINISHED = 16384
# The record of a job the worker cannot write is not worth failing the job for: it is retried
# for this long, then the job is settled without it (and the failure logged).
_RECORD_PATIENCE = 5.0
# A kept result is the job's point: its record is written again for this long (a leader
# election takes seconds) while the worker holds the job, which is then given back.
_RESULT_PATIENCE = 120.0


#: The key of an answer to a ``held`` question from a worker that settled the job for good.
SETTLED = "settled"


class JobBook:
    """Expiry, cancels and job records for one worker; records are written on
    ``writer_conn`` (``conn``, or a connection of their own)."""

    def __init__(
        self,
        app: App,
        conn: Connection,
        running: dict[JobRun, asyncio.Task[None]],
        writer_conn: Connection,
        buffered: Callable[[], Iterable[Delivery]],
    ) -> None:
        self.app = app
        self.conn = conn
        self._buffered = buffered
        self._reader = Records(conn, app.namespace)
        self._halts: Serving | None = None
        self._helds: Serving | None = None
        #: Places (partition, stream sequence) of jobs settled for good (acknowledged or
        #: ended), newest last.
        self.finished: deque[tuple[int, int]] = deque(maxlen=_REMEMBERED_FINISHED)
        #: Successes by place whose record is being stored: their ack waits for it, so this
        #: worker still holds them (a job is finished only once its ack is sent).
        self.storing: dict[tuple[int, int], JobRun] = {}
        #: Jobs in a slot that wait for a limit (a rate, a partition's lease), with the reason
        #: a status gives: such a job is queued, not running (see :mod:`.limited`).
        self.held_back: dict[JobRun, str] = {}
        self.worker = f"{socket.gethostname()}:{os.getpid()}"
        self._running = running
        # Kept results whose records are being written again (see _keep_trying).
        self._trying: set[asyncio.Task[None]] = set()
        self._writer = AckedPublisher(
            writer_conn, patience=_RECORD_PATIENCE, batched=conn.server_version >= BATCHED_SINCE
        )
        self._successes = SuccessRecords(self.worker, app.serializer.content_type)
        self._record_prefix = app.namespace.record_subject("")  # + job id: its record's subject
        self._ttl_headers: dict[float, dict[str, str]] = {}
        #: Whether jobs have records (an older server has no jobs bucket: jobs run as before,
        #: without records).
        self.records = conn.server_version >= RECORDS_SINCE
        #: Whether a kept result's job gets a future resolved at its ack (``JobRun.acked``),
        #: for steps that must come after it.
        self.track_acks = False
        #: (job id, stream sequence) of the jobs cancelled while this worker runs, newest last
        #: (read before a job starts).
        self.cancelled: OrderedDict[tuple[str, int], None] = OrderedDict()

    async def start(self) -> None:
        """Listen for cancels of jobs this worker may hold, and for the server's answers to
        records."""
        ns = self.app.namespace
        self._halts = await serve_app(self.app, self.conn, ns.halt_subject(), self._on_halt, "halt")
        self._helds = await serve_app(self.app, self.conn, ns.held_subject(), self._on_held, "held")
        if self.records:
            await self._writer.start()

    async def _on_halt(self, subject: str, body: bytes) -> bytes | None:
        job_id, place = subject.rsplit(".", 1)[-1], parse_place(body.decode(errors="replace"))
        if place is None:
            return None
        partition, seq = place
        try:
            if (
                await LimitsStream(self.conn, self.app.namespace.partition_stream(partition)).get(seq)
                is not None
            ):
                return None  # the server still holds the job: no cancel took it
        except JsworkerError as exc:
            log.warning("job.cancel_unconfirmed", job_id=job_id, error=str(exc))
            return None
        for job, task in list(self._running.items()):
            if job.job_id == job_id and job.place == place:
                if not job.cancel_requested:
                    job.cancel_requested = True
                    log.info("job.cancel_requested", **job.log_fields())
                    # A sync task's thread goes on (it can read current_job().cancelled); the
                    # coroutine awaiting it is cancelled like an async task's.
                    task.cancel()
                return STOPPED
        if place in self.finished or place in self.storing:
            return FINISHED  # (ran to its end; the ack of one being stored waits for its record)
        if any(self._placed(d) == place for d in self._buffered()):
            self.cancelled[job_id, seq] = None
            while len(self.cancelled) > _REMEMBERED_CANCELS:
                self.cancelled.popitem(last=False)
            return DROPPED
        return None

    async def _on_held(self, subject: str, body: bytes) -> bytes | None:
        # Who holds the job at this sequence, for its status: read from memory, nothing is
        # written per job for it. A job still in the buffer has no start time yet.
        job_id, place = subject.rsplit(".", 1)[-1], parse_place(body.decode(errors="replace"))
        if place is None:
            return None
        for job in list(self._running):
            if job.job_id == job_id and job.place == place:
                waiting = self.held_back.get(job)
                if waiting is not None:
                    return self._holder(None, job.attempt, waiting=waiting)
                began = time.time() - (time.monotonic() - job.started) if job.started else None
                return self._holder(began, job.attempt, job.progress)
        for delivery in self._buffered():
            if self._placed(delivery) == place:
                return self._holder(None, delivery.attempt)
        storing = self.storing.get(place)
        if storing is not None and storing.job_id == job_id:
            # Run to its end, its record not stored yet: held, never settled, until its ack
            # goes out (should this worker die first, the job must run again).
            return self._holder(None, storing.attempt)
        if place in self.finished:
            # Settled here for good, and asked of all the same: its acknowledgement was lost.
            return json.dumps({"worker": self.worker, SETTLED: True}).encode()
        return None

    def _placed(self, delivery: Delivery) -> tuple[int, int]:
        """The place of a delivery not taken up as a job yet (a buffered one)."""
        return self.app.namespace.partition_in(delivery.subject), delivery.stream_seq

    def _holder(
        self,
        started_at: float | None,
        attempt: int,
        progress: tuple[float, str | None] | None = None,
        waiting: str | None = None,
    ) -> bytes:
        said: dict[str, Any] = {"worker": self.worker, "started_at": started_at, "attempt": attempt}
        if progress is not None:
            said["progress"], said["progress_message"] = progress
        if waiting is not None:
            said["waiting"] = waiting
        return json.dumps(said).encode()

    async def read_failures(self, job: JobRun) -> int:
        """Set and return ``job.failures``: the task's own failures in the job's earlier runs,
        from its ``retrying`` record (none on a first delivery, or when no record names this
        message: its earlier runs crashed). Without records (a server before 2.11) every
        earlier run not given back counts as a failure, as the delivery count says."""
        if job.failures is not None:
            return job.failures
        # Unknown (no records, or none readable): every earlier run not given back counts.
        failures = max(0, job.attempt - 1 - job.handed_back)
        if job.attempt == 1:
            failures = 0
        elif self.records:
            try:
                record = await self.record_of(job)
            except JsworkerError as exc:
                log.warning("job.record_unread", error=str(exc), **job.log_fields())
            else:
                if record is None:
                    failures = 0
                else:
                    # A record from before failures were counted has its attempt number.
                    failures = record.failures or record.attempts
                    job.snoozes = record.snoozes
        job.failures = failures
        return failures

    async def record_of(self, job: JobRun) -> JobRecord | None:
        """The record of this delivery's message: None when the job's record names another
        (or there is none). Raises :class:`JsworkerError` when it cannot be read."""
        found = await self._reader.read(job.job_id)
        record = found[1] if found is not None else None
        return record if record is not None and record.seq == job.delivery.stream_seq else None

    def keep_result(
        self, job: JobRun, outcome: Outcome, started: float, *, value_kept: bool = True
    ) -> Outcome:
        """Write the record of ``job``'s success, with its return value when ``value_kept``,
        and ack the job once it is stored (the run ends without waiting for that): the common
        path of a task that keeps results, and of every success when final states are kept.
        ``started`` is the run's ``time.monotonic()``. Returns ``outcome``, or a failure never
        retried when the value cannot be encoded or stored."""
        value: bytes | None = None
        if value_kept:
            serializer = self.app.serializer
            typed = job.task.typed_result if job.task is not None else None
            try:
                value = serializer.dumps(outcome.value if typed is None else typed.encode(outcome.value))
            except Exception as exc:  # an encoder may raise anything on a foreign object
                return _unstorable(
                    f"return value cannot be encoded with {serializer.content_type}: {exc}", exc
                )
            limit = self.conn.max_payload
            if len(value) + 1024 > limit:
                return _unstorable(
                    f"return value of {len(value)} bytes does not fit a message (max_payload {limit})", None
                )
        if self.track_acks:
            job.acked = asyncio.get_running_loop().create_future()
        if not self.records:
            self._acked(job, None)
            return outcome
        task = job.task
        ttl = (task.options if task is not None else self.app.defaults).result_ttl
        headers = self._ttl_headers.get(ttl)
        if headers is None:
            headers = self._ttl_headers[ttl] = ttl_headers(ttl)
        now = time.time_ns() // 1000
        body = self._successes.encode(
            job.queue, job.task_name, job.delivery.stream_seq, job.attempt,
            now - int((time.monotonic() - started) * 1_000_000), now, value,
        )  # fmt: skip
        # The size is bounded above: the record fits a message.
        msg = OutMessage(self._record_prefix + job.job_id, body, headers)
        self.storing[job.place] = job
        self._writer.send(msg, self._kept, (job, msg))
        return outcome

    def _kept(self, arg: tuple[JobRun, OutMessage], error: BaseException | None) -> None:
        """How a kept result's record ended (in the read loop): stored or refused, the job is
        acked; unanswered (a stream electing its leader), it is written again while the
        worker holds the job (:meth:`_keep_trying`)."""
        job, msg = arg
        if not isinstance(error, StalledError):
            self._acked(job, error)
            return
        trying = asyncio.get_running_loop().create_task(self._keep_trying(job, msg))
        self._trying.add(trying)
        trying.add_done_callback(self._trying.discard)

    async def _keep_trying(self, job: JobRun, msg: OutMessage) -> None:
        """Write a kept result's record until the server stores it, keeping the job (its
        message unacknowledged, told in progress) meanwhile: the job is acked once its result
        is kept. Given up after :data:`_RESULT_PATIENCE` (or when the worker stops), the job is
        given back to run again, so that its result is kept then; it is never acked without."""
        deadline = time.monotonic() + _RESULT_PATIENCE
        log.warning("job.result_retrying", message="no acknowledgement of its record yet", **job.log_fields())
        try:
            while True:
                # Held: not handed to another worker meanwhile (best effort: the connection may
                # be going, and then the server hands the job out again after its ack wait).
                with contextlib.suppress(Exception):
                    await job.delivery.in_progress()
                try:
                    await self._writer.publish(msg)
                    self._acked(job, None)
                    return
                except StalledError:
                    if time.monotonic() >= deadline:
                        break
                except EnqueueError as exc:
                    self._acked(job, exc)  # refused: as any record the server will not take
                    return
            log.error(
                "job.result_unkept",
                message="the server did not store it; the job runs again",
                **job.log_fields(),
            )
        finally:
            if not job.delivery.settled:
                self.storing.pop(job.place, None)  # given back: no longer held here
                with contextlib.suppress(Exception):  # as above: redelivered after its ack wait
                    await job.delivery.nak()

    async def drain(self) -> None:
        """Wait until every record written is stored or given up on (and its job acked or
        given back)."""
        await self._writer.drain()
        for trying in list(self._trying):
            trying.cancel()  # given back: another worker runs it and keeps its result
        await asyncio.gather(*self._trying, return_exceptions=True)

    async def close(self) -> None:
        """Stop hearing of cancels and writing records (after :meth:`drain`)."""
        for serving in (self._halts, self._helds):
            if serving is not None:
                await serving.close()
        await self._writer.close()

    async def record(self, job: JobRun, outcome: Outcome, decision: Decision, started: float) -> bool:
        """Write ``job``'s record for ``outcome`` settled by ``decision``: a success without
        a value (after retries), a failure, a retry, an expiry; nothing for a shutdown's
        hand-back or a cancel (the cancel wrote its own). False when a record was due and
        could not be written."""
        kind = outcome.kind
        if not self.records:
            return False
        if kind in (OutcomeKind.CANCELLED, OutcomeKind.SKIPPED, OutcomeKind.ABORTED):
            return True
        task = job.task
        options = task.options if task is not None else self.app.defaults
        now = time.time()
        error = _error(outcome)
        next_at: float | None = None
        if kind is OutcomeKind.SUCCEEDED:
            state = JobState.SUCCEEDED
        elif kind is OutcomeKind.EXPIRED:
            state = JobState.EXPIRED
        elif decision.verb is Verb.NAK:
            waits = JobState.SNOOZED if kind is OutcomeKind.SNOOZED else JobState.RETRYING
            state, next_at = waits, now + (decision.delay or 0.0)
        else:
            state = JobState.FAILED
        record = JobRecord(
            state=state,
            queue=job.queue,
            task=job.task_name,
            seq=job.delivery.stream_seq,
            attempts=job.attempt if kind is not OutcomeKind.EXPIRED else job.attempt - 1,
            failures=(job.failures or 0) + is_failure(outcome),
            snoozes=job.snoozes + (kind is OutcomeKind.SNOOZED),
            started_at=started if kind is not OutcomeKind.EXPIRED else None,
            finished_at=None if next_at is not None else now,
            next_attempt_at=next_at,
            worker=self.worker,
            error=error,
            reason=(decision.reason or outcome.reason)[:MAX_MESSAGE] or None,
        )
        msg = record_message(self.app.namespace, job.job_id, record, options.result_ttl)
        if msg.size > self.conn.max_payload and error is not None:
            # A server with a small max_payload: the traceback goes first.
            error = JobError(error.type, error.message)
            record = dataclasses.replace(record, error=error)
            msg = record_message(self.app.namespace, job.job_id, record, options.result_ttl)
        return await self._write(job, msg)

    async def _write(self, job: JobRun, msg: OutMessage) -> bool:
        try:
            await self._writer.publish(msg)
        except EnqueueError as exc:
            log.error("job.record_failed", error=str(exc), **job.log_fields())
            return False
        return True

    def _acked(self, job: JobRun, error: BaseException | None) -> None:
        """Ack a success once its record is stored (or refused, ``error``): the record before
        the ack, so a crash in between runs the job again, never leaving a waiter without its
        result; from then on the job is finished here."""
        if error is not None:
            log.error("job.record_failed", error=str(error), **job.log_fields())
        self.storing.pop(job.place, None)
        self.finished.append(job.place)
        job.delivery.ack_soon()
        if job.acked is not None:
            job.acked.set_result(None)


def _unstorable(reason: str, exc: BaseException | None) -> Outcome:
    return Outcome(OutcomeKind.FAILED, reason, error=exc, retryable=False)


def _error(outcome: Outcome) -> JobError | None:
    exc = outcome.error
    if exc is None:
        if outcome.kind in (OutcomeKind.SUCCEEDED, OutcomeKind.EXPIRED):
            return None
        return JobError(outcome.kind.value, outcome.reason[:MAX_MESSAGE])
    return JobError.of(exc, outcome.reason)
