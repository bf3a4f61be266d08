"""A job's status, read from what the server holds: no write on the hot path is needed for it.

=========  ==============================================================================
state      read from
=========  ==============================================================================
scheduled  a delayed job's schedule subject (``sched.at.<queue>.<due>.<job id>``)
queued     the job's message (its subject ends in the job id), past the consumer's
           delivered sequence; or in a fair queue's intake, waiting for its turn
running    the job's message at or before the delivered sequence, and the worker holding it
           says it started it (see :func:`holder_state`); handed out and not started yet (in
           a worker's buffer, held back for a limit, waiting for a task process, or held by
           a worker that does not answer) it is queued, with the reason
retrying   the same, with a ``retrying`` record whose next attempt is still to come
succeeded  the job's record (written for tasks that keep results, and for a success after
           retries)
failed     the job's record, written when it is dead-lettered
cancelled  the record a cancel writes
expired    the record written when a worker finds it expired
unknown    none of these: never enqueued, or finished and not recorded (a first-attempt
           success of a task that keeps no results) or its record expired
=========  ==============================================================================
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .._wire.headers import MOVED, TASK
from .._wire.names import partition_of, place_token
from ..jetstream.connection import Connection
from ..jetstream.inspect import delivered_seq as delivered_seq
from ..jetstream.limits_stream import LimitsStream, StoredMessage
from ..jetstream.service import gather
from .bucket import Records
from .state import Form, JobRecord, JobState, JobStatus

if TYPE_CHECKING:
    from .._core.view import AppView

#: The ``reason`` of a queued job that waits for its partition's turn on a fair queue.
WAITING_TURN = "waiting for its partition's turn (fair queue)"
#: The ``reason`` of a queued job a worker reserved and has not started (in its buffer).
RESERVED = "reserved by a worker, not started yet"
#: The ``reason`` of a queued job handed out that no worker says it holds.
UNHELD = (
    "handed to a worker that does not answer (gone, or its event loop busy): the server hands it "
    "out again when its ack wait ends"
)
# How long a status waits for the worker running a job to say so: a live one answers within
# milliseconds.
_HELD_WAIT = 0.5


async def job_status(app: AppView, conn: Connection, job_id: str, form: Form | None = None) -> JobStatus:
    """The status of job ``job_id`` (``unknown`` when nothing is known of it); with ``form``,
    only whether it is in that form (see :data:`Form`)."""
    ns = app.namespace
    if form == "scheduled":
        return await _scheduled(app, conn, job_id) or JobStatus(job_id, JobState.UNKNOWN)
    if form == "waiting":
        message = await current_message(app, conn, job_id)
        if message is None:
            return JobStatus(job_id, JobState.UNKNOWN)
        return await _in_stream(conn, app, job_id, message, None, ask_holder=False)
    records = Records(conn, ns)
    found = await records.read(job_id)
    record = found[1] if found is not None else None
    message = await current_message(app, conn, job_id)
    if record is not None and record.state.finished and (message is None or message.seq == record.seq):
        return record.status(job_id)
    if message is not None:
        # A finished record of another message is a previous run of a unique job.
        return await _in_stream(conn, app, job_id, message, record)
    scheduled = await _scheduled(app, conn, job_id) or await _waiting_turn(app, conn, job_id)
    if scheduled is not None:
        return scheduled
    # It may have finished between the reads.
    found = await records.read(job_id)
    if found is not None:
        return found[1].status(job_id)
    return JobStatus(job_id, JobState.UNKNOWN)


async def _scheduled(app: AppView, conn: Connection, job_id: str) -> JobStatus | None:
    """The status of ``job_id`` as a delayed job waiting for its time, None when it is not."""
    ns = app.namespace
    # Enqueued first, then made a schedule by a worker: read in that order, a job moving
    # between the two reads is still found in the second.
    schedule = await LimitsStream(conn, ns.stream).next(ns.later_filter(job_id=job_id))
    parsed = ns.parse_later_subject(schedule.subject) if schedule is not None else None
    if schedule is None or parsed is None:
        schedule = await LimitsStream(conn, ns.schedules_stream).next(ns.delayed_filter(job_id=job_id))
        parsed = ns.parse_delayed_subject(schedule.subject) if schedule is not None else None
    if schedule is None or parsed is None:
        return None
    queue, due_ms, _ = parsed
    return JobStatus(
        job_id,
        JobState.SCHEDULED,
        queue=queue,
        task=schedule.headers.get(TASK),
        scheduled_for=datetime.fromtimestamp(due_ms / 1000, UTC),
        seq=schedule.seq,
    )


async def _waiting_turn(app: AppView, conn: Connection, job_id: str) -> JobStatus | None:
    """The status of ``job_id`` as a job waiting for its partition's turn on a fair queue (in
    its intake), None when it is not."""
    waiting = await intake_message(app, conn, job_id)
    if waiting is None:
        return None
    queue, task = app.namespace.parse_intake_subject(waiting.subject) or ("", "")
    return JobStatus(job_id, JobState.QUEUED, queue=queue, task=task, seq=waiting.seq, reason=WAITING_TURN)


async def intake_message(app: AppView, conn: Connection, job_id: str) -> StoredMessage | None:
    """The message of ``job_id`` while it waits in a fair queue's intake for its turn; None
    once it moved (or when the app has no fair queue: nothing is read)."""
    if not app.fair_queues:
        return None
    ns = app.namespace
    jobs = LimitsStream(conn, ns.stream)
    waiting = await jobs.next(ns.intake_filter(job_id=job_id))
    if waiting is None or MOVED in waiting.headers:
        return None
    # Moved an instant ago: its marker stands behind it until its message is deleted.
    last = await jobs.last(waiting.subject)
    return None if last is None or MOVED in last.headers else waiting


def job_partitions(app: AppView, job_id: str) -> list[int]:
    """The partitions job ``job_id`` may be in: where its id puts it in a queue of each
    partition count the app has or had (while its partitions change), and 0 (where a
    workflow's steps stay). Read at once: one round trip whatever their number."""
    app_layouts = (app.options.partitions, app.options.previous_partitions or 1)
    counts = {*app_layouts, *(n for q in app.queue_options for n in app.queue_layouts(q))}
    return sorted({0, *(partition_of(job_id, n) for n in counts)})


async def current_message(app: AppView, conn: Connection, job_id: str) -> StoredMessage | None:
    """The message of ``job_id`` while it waits or runs (in the stream of its partition, whose
    sequence it has), None once it has left."""
    ns = app.namespace
    places = job_partitions(app, job_id)
    found = await asyncio.gather(
        *(LimitsStream(conn, ns.partition_stream(k)).next(ns.job_filter(job_id, k)) for k in places)
    )
    return next((message for message in found if message is not None), None)


async def _in_stream(
    conn: Connection,
    app: AppView,
    job_id: str,
    message: StoredMessage,
    record: JobRecord | None,
    *,
    ask_holder: bool = True,
) -> JobStatus:
    ns = app.namespace
    queue, task = ns.parse_job_subject(message.subject) or ("", "")
    retrying = record is not None and record.state.resting and record.seq == message.seq
    if record is not None and retrying and (record.next_attempt_at or 0.0) > time.time():
        return record.status(job_id)
    partition = ns.partition_in(message.subject)
    delivered = await delivered_seq(conn, ns.partition_stream(partition), queue)
    attempts = record.attempts if record is not None and record.seq == message.seq else None
    if message.seq > delivered or not ask_holder:
        state = JobState.QUEUED if message.seq > delivered else JobState.RUNNING
        return JobStatus(job_id, state, queue=queue, task=task, attempts=attempts, seq=message.seq)
    # Handed out: the worker holding it says who it is, whether and when it started it and
    # which attempt this is.
    place = place_token(message.seq, partition).encode()
    held = await gather(conn, ns.held_subject(job_id), place, wait=_HELD_WAIT, linger=0.0)
    holder = holder_said(held)
    if not holder and retrying and record is not None:
        # Due again, and not yet taken by a worker (all busy, say): still retrying, not a
        # job whose worker is gone.
        return record.status(job_id)
    state, reason = holder_state(holder)
    worker = holder.get("worker")
    progress, progress_message = progress_said(holder)
    return JobStatus(
        job_id,
        state,
        queue=queue,
        task=task,
        attempts=holder.get("attempt", attempts),
        started_at=datetime.fromtimestamp(holder["started_at"], UTC) if state is JobState.RUNNING else None,
        worker=worker if isinstance(worker, str) else None,
        reason=reason,
        seq=message.seq,
        progress=progress,
        progress_message=progress_message,
    )


def holder_state(holder: dict[str, Any]) -> tuple[JobState, str | None]:
    """What the answer of the worker holding a job handed out (:func:`holder_said`) makes of
    it: running once that worker started it; else queued, with why it has not started (in
    the worker's buffer or slot, held back for a limit, waiting for a task process, or no
    worker says it holds it)."""
    if not holder:
        return JobState.QUEUED, UNHELD
    waiting = holder.get("waiting")
    if isinstance(waiting, str):
        return JobState.QUEUED, waiting
    started = holder.get("started_at")
    if not isinstance(started, int | float) or isinstance(started, bool):
        return JobState.QUEUED, RESERVED
    return JobState.RUNNING, None


def progress_said(holder: dict[str, Any]) -> tuple[float | None, str | None]:
    """The progress (fraction, message) a worker holding a job said, as far as it makes sense."""
    fraction, message = holder.get("progress"), holder.get("progress_message")
    said = float(fraction) if isinstance(fraction, int | float) and not isinstance(fraction, bool) else None
    return said, (message if isinstance(message, str) else None)


def holder_said(answers: list[bytes]) -> dict[str, Any]:
    """The first answer to a ``held`` question that reads as a holder's, else nothing (an
    answer from a worker that settled the job, its acknowledgement lost, holds nothing)."""
    for raw in answers:
        with contextlib.suppress(ValueError):
            doc = json.loads(raw)
            if isinstance(doc, dict) and not doc.get("settled"):
                return doc
    return {}
