"""Cancelling a job in any state before it finishes, as a user that may (a worker, an
operator) does it; producers with the cancel permission ask a worker to (see
:mod:`jsworker._runtime.questions`).

* **scheduled**: the schedule is deleted and its firing claimed as cancelled
  (:func:`~jsworker._scheduling.delayed.cancel_delayed`).
* **queued, retrying or running**: its message is deleted from the stream (its subject ends
  in the job id), so no worker receives it again, not even after the one holding it is
  restarted. If the queue's consumer had handed it out, the workers are asked on
  ``jsw.<app>.halt.<job id>`` whether one holds it: each checks with the server that the
  message is gone, then drops it unstarted from its buffer or stops it while it runs, and says
  so; a worker that had already finished it says that, and the cancel reports False. Then a
  ``cancelled`` record is written.
* **waiting for its turn** on a fair queue: its message is deleted from the intake; a mover
  that read it before cannot move it any more (see :mod:`jsworker._limits.fair`).

True therefore means the job did not finish and will not start. The record is written only
over the record read before the delete (compare-and-set): a worker that stored the job's
result in between wins, and the cancel reports False.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .._errors import LimitsStreamError
from .._observability.metrics import UNKNOWN
from .._scheduling.declare import DELAYED_SINCE
from .._scheduling.delayed import cancel_delayed
from .._wire.names import place_token
from ..events._emit import EventEmitter
from ..jetstream.connection import Connection
from ..jetstream.inspect import delivered_seq
from ..jetstream.limits_stream import LimitsStream
from ..jetstream.service import gather
from ..jetstream.stored import SubjectMoved
from .bucket import RECORDS_SINCE, Records
from .lookup import current_message, intake_message
from .state import JobRecord, JobState

if TYPE_CHECKING:
    from .._core.view import AppView

# A worker writing a retrying record at the same instant can move the record under a cancel
# a few times at most; more means something else keeps writing.
_ATTEMPTS = 5
#: What a worker answers about a cancelled job it holds: it dropped it before it started, it
#: stopped it while it ran, or it had finished it already.
DROPPED, STOPPED, FINISHED = b"dropped", b"stopped", b"finished"
# How long the workers get to answer whether one holds a job that was handed out: a live
# worker answers within milliseconds; silence means the holder is gone (its copy is
# redelivered nowhere, since the message is deleted).
_HOLDER_WAIT = 1.0
# After the first answer, a moment for a second holder (a copy redelivered after ack_wait).
_HOLDER_LINGER = 0.05


async def cancel_job(app: AppView, conn: Connection, job_id: str) -> bool:
    """Cancel ``job_id``: True when it was waiting or running and now never runs (again),
    False when there was nothing to cancel (unknown, or already finished)."""
    ns = app.namespace
    records = Records(conn, ns)
    scheduled = await cancel_delayed(app, conn, job_id) if conn.server_version >= DELAYED_SINCE else None
    if scheduled is not None:
        if conn.server_version >= RECORDS_SINCE:
            await _record(app, records, job_id, *scheduled, 0)
        return True
    message = await current_message(app, conn, job_id)
    if message is None and app.fair_queues:
        waiting = await intake_message(app, conn, job_id)
        if waiting is not None and await LimitsStream(conn, ns.stream).delete(waiting.seq):
            queue, task = ns.parse_intake_subject(waiting.subject) or ("", "")
            return await _cancelled(app, conn, records, job_id, queue, task, waiting.seq)
        # Moved into its queue since it was looked for (a move stores its copy and rolls the
        # job up at once): it is cancelled there.
        message = await current_message(app, conn, job_id)
    if message is None:
        return False
    queue, task = ns.parse_job_subject(message.subject) or ("", "")
    partition = ns.partition_in(message.subject)
    jobs = LimitsStream(conn, ns.partition_stream(partition))
    found = await records.read(job_id) if conn.server_version >= RECORDS_SINCE else None
    if found is not None and found[1].state.finished and found[1].seq == message.seq:
        return False
    if not await _delete(jobs, message.seq):
        return False  # settled (or cancelled) since it was read
    # Deleted, it can no longer be handed out: whoever got it got it before. A job waiting
    # out a retry's delay is held by nobody.
    record = found[1] if found is not None and found[1].seq == message.seq else None
    resting = (
        record is not None
        and record.state.resting
        and (record.next_attempt_at or 0.0) > time.time() + _HOLDER_WAIT
    )
    if not resting and await delivered_seq(conn, jobs.stream, queue) >= message.seq:
        place = place_token(message.seq, partition).encode()
        answers = await gather(conn, ns.halt_subject(job_id), place, wait=_HOLDER_WAIT, linger=_HOLDER_LINGER)
        if FINISHED in answers:
            return False
    last = found[0] if found is not None else 0
    return await _cancelled(app, conn, records, job_id, queue, task, message.seq, last)


async def _delete(jobs: LimitsStream, seq: int) -> bool:
    """Delete the job's message; False when it was gone already.

    A delete the server did not answer (a stalled or electing leader) may have been done:
    failing the cancel then would leave the job deleted with no ``cancelled`` record and its
    holder never told. It is sent once more (an asker waits ``publish_timeout``, 15 s by
    default; a try, up to the JetStream API's 5 s), and the message counts as deleted by
    this cancel even if the second try finds it gone: a job settled meanwhile is told apart
    after, by its holder's answer and by its record's compare-and-set."""
    try:
        return await jobs.delete(seq)
    except LimitsStreamError as exc:
        if not exc.transient:
            raise
    await jobs.delete(seq)
    return True


async def _cancelled(
    app: AppView,
    conn: Connection,
    records: Records,
    job_id: str,
    queue: str,
    task: str,
    seq: int,
    last: int | None = None,
) -> bool:
    """Its record, metric and event, once the job's message is deleted: False when a worker
    finished the job first (its record moved)."""
    newer = conn.server_version >= RECORDS_SINCE
    if newer and not await _record(app, records, job_id, queue, task, seq, last):
        return False
    label = task if task in app.tasks else UNKNOWN
    app.metrics.cancelled.labels(queue, label).inc()
    if app.options.events:
        await EventEmitter(conn, app.namespace, app.metrics).emit("cancelled", queue, label, job_id)
    return True


async def _record(
    app: AppView, records: Records, job_id: str, queue: str, task: str, seq: int, last: int | None = None
) -> bool:
    """Write the ``cancelled`` record over the one at ``last`` (None: whatever is there);
    False when a worker finished the job first."""
    known = app.tasks.get(task)
    ttl = (known.options if known is not None else app.defaults).result_ttl
    record = JobRecord(JobState.CANCELLED, queue, task, seq=seq, finished_at=time.time(), reason="cancelled")
    for _ in range(_ATTEMPTS):
        if last is None:
            found = await records.read(job_id)
            last = found[0] if found is not None else 0
        try:
            await records.write(job_id, record, ttl, expect_last=last)
            return True
        except SubjectMoved:
            found = await records.read(job_id)
            if found is not None and found[1].state.finished:
                return False
            last = found[0] if found is not None else 0
    return False
