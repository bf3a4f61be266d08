"""Delayed jobs: a job stored as an ``@at`` schedule that the server turns into the job at its
due time, and the cancel that removes it before then."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from .._observability.metrics import UNKNOWN
from .._wire.headers import (
    EXPECTED_LAST_SUBJECT_SEQ,
    EXPECTED_LAST_SUBJECT_SEQ_SUBJECT,
    JOB_ID,
    MSG_ID,
    SCHEDULE,
    SCHEDULE_TARGET,
    SCHEDULED_FOR,
    TASK,
    UNIQUE,
)
from .._wire.names import is_name
from ..events._emit import EventEmitter
from ..jetstream.limits_stream import LimitsStream
from ..jetstream.message import OutMessage
from .claims import CANCELLED, claim
from .declare import DELAYED_SINCE, at_expression
from .markers import remove_markers

if TYPE_CHECKING:
    from .._core.view import AppView
    from .._wire.names import Namespace
    from ..jetstream.connection import Connection


def due_ms(due: datetime) -> int:
    """``due`` in unix milliseconds, rounded up: a job fires at or after its due time, never
    a fraction before."""
    return math.ceil(due.timestamp() * 1000)


def later_message(namespace: Namespace, queue: str, job: OutMessage, due: datetime) -> OutMessage:
    """The message that enqueues ``job`` (an immediate job's message) to run at ``due``.

    It waits in the job stream, where producers write, until a worker makes it a schedule
    (:func:`schedule_message`): producers never write a schedule. It keeps ``Nats-Msg-Id``:
    enqueueing the same delayed job id twice inside the dedup window stores it once.
    """
    at = due_ms(due)
    job_id = job.headers.get(MSG_ID) or job.headers[JOB_ID]
    headers = dict(job.headers)
    headers[JOB_ID] = job_id
    headers[SCHEDULED_FOR] = str(at)
    if EXPECTED_LAST_SUBJECT_SEQ in headers and EXPECTED_LAST_SUBJECT_SEQ_SUBJECT not in headers:
        # An id the caller chose: no other delayed job of it may wait, whatever its due time.
        # (A unique job's check covers every form of its key already.)
        headers[EXPECTED_LAST_SUBJECT_SEQ_SUBJECT] = namespace.later_filter(job_id=job_id)
    return OutMessage(namespace.later_subject(queue, at, job_id), job.body, headers)


def schedule_message(
    namespace: Namespace, subject: str, body: bytes, headers: Mapping[str, str]
) -> OutMessage:
    """The ``@at`` schedule of the delayed job enqueued as ``subject``, ``body``, ``headers``
    (a message of :func:`later_message`'s), firing the job into the schedules stream at its
    due time; ValueError when ``subject`` is no delayed job's.

    The schedule is made here, by a worker, from the subject's due time and job id: what a
    producer wrote cannot make it fire twice, elsewhere or as another job. The job's own
    headers ride on the schedule and so on the job it fires; the server strips
    ``Nats-Msg-Id`` from a fired job, so the job id also travels as ``Jsw-Job-Id``.
    """
    parsed = namespace.parse_later_subject(subject)
    if parsed is None:
        raise ValueError(f"{subject!r} is no delayed job's subject")
    queue, at, job_id = parsed
    task = headers.get(TASK, "")
    # A name that cannot be a subject token still fires, onto a task no app has: the worker
    # that receives it dead-letters it as an unknown task.
    token = task if is_name(task) else "_unknown"
    out = {k: v for k, v in headers.items() if not k.lower().startswith("nats-")}
    out[MSG_ID] = job_id
    out[JOB_ID] = job_id
    out[SCHEDULED_FOR] = str(at)
    out[SCHEDULE] = at_expression(datetime.fromtimestamp(at / 1000, UTC))
    out[SCHEDULE_TARGET] = namespace.fired_subject(namespace.job_subject(queue, token, job_id))
    if EXPECTED_LAST_SUBJECT_SEQ in headers:
        out[EXPECTED_LAST_SUBJECT_SEQ] = "0"
        out[EXPECTED_LAST_SUBJECT_SEQ_SUBJECT] = namespace.delayed_filter(job_id=job_id)
    if unique_later(headers):
        # Told by the worker, from what the server checked: the job it fires takes its key's
        # marker away once it is in its queue (see :func:`marker_message`).
        out[UNIQUE] = "1"
    return OutMessage(namespace.delayed_subject(queue, at, job_id), body, out)


def unique_later(headers: Mapping[str, str]) -> bool:
    """Whether a delayed job's message (:func:`later_message`'s) is a unique job's: checked
    against the job's other forms, with no dedup key (an id the caller chose keeps one)."""
    return EXPECTED_LAST_SUBJECT_SEQ in headers and MSG_ID not in headers


class DelayedJobs:
    """The producer's part of delayed jobs (a :class:`jsworker._enqueue.producer.DelayedStore`): the
    server must keep message schedules, and a job is enqueued for a worker to schedule."""

    def check(self, conn: Connection) -> None:
        """:class:`~jsworker.ServerVersionError` on a server without message schedules: no
        worker could schedule the job there."""
        conn.require_version("delayed jobs", DELAYED_SINCE)

    def message(self, namespace: Namespace, queue: str, job: OutMessage, due: datetime) -> OutMessage:
        """The message that enqueues ``job`` for ``due`` (see :func:`later_message`)."""
        return later_message(namespace, queue, job, due)


async def cancel_delayed(app: AppView, conn: Connection, job_id: str) -> tuple[str, str] | None:
    """Remove delayed job ``job_id`` wherever it waits unfired (enqueued, or made a schedule);
    the queue and task of the one removed, or None when none was.

    Each message is deleted first, then the firing claimed as cancelled: a schedule a worker
    made of it meanwhile, or a copy the server fired in the instant before the delete, is then
    dropped by the worker that would move it into its queue, unless a worker had already
    claimed it (the job is on its way to run: too late, None).
    """
    ns = app.namespace
    cancelled: tuple[str, str] | None = None
    places = (
        (LimitsStream(conn, ns.stream), ns.later_filter(job_id=job_id), ns.parse_later_subject),
        (LimitsStream(conn, ns.schedules_stream), ns.delayed_filter(job_id=job_id), ns.parse_delayed_subject),
    )
    for stream, subjects, parse in places:
        seq = 1
        while (found := await stream.next(subjects, seq)) is not None:
            seq = found.seq + 1
            parsed = parse(found.subject)
            if parsed is None or not await stream.delete(found.seq):
                continue  # moved, fired or removed since it was read
            queue, due, _ = parsed
            if await claim(conn, ns, job_id, due, CANCELLED) is None and cancelled is None:
                task = found.headers.get(TASK, "")
                cancelled = (queue, task)
                # Label values and event subjects only take names the app declares.
                label = task if task in app.tasks else UNKNOWN
                app.metrics.cancelled.labels(queue, label).inc()
                if app.options.events:
                    await EventEmitter(conn, ns, app.metrics).emit("cancelled", queue, label, job_id)
    # After its schedule: the key is free once neither holds it (a marker left behind by a
    # worker stopped half way through is removed here too).
    await remove_markers(conn, ns, job_id)
    return cancelled
