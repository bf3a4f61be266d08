"""Delayed jobs: a job stored as an ``@at`` schedule that the server turns into the job at its
due time, and the cancel that removes it before then."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..events.emit import EventEmitter
from ..jetstream.limits_stream import LimitsStream
from ..jetstream.message import OutMessage
from ..observability.metrics import UNKNOWN
from ..wire import (
    EXPECTED_LAST_SUBJECT_SEQ,
    EXPECTED_LAST_SUBJECT_SEQ_SUBJECT,
    JOB_ID,
    MSG_ID,
    SCHEDULE,
    SCHEDULE_TARGET,
    SCHEDULED_FOR,
    TASK,
)
from .claims import CANCELLED, claim
from .declare import DELAYED_SINCE, at_expression

if TYPE_CHECKING:
    from ..appview import AppView
    from ..jetstream.connection import Connection
    from ..naming import Namespace


def due_ms(due: datetime) -> int:
    """``due`` in unix milliseconds, rounded up: a job fires at or after its due time, never
    a fraction before."""
    return math.ceil(due.timestamp() * 1000)


def delayed_message(namespace: Namespace, queue: str, job: OutMessage, due: datetime) -> OutMessage:
    """The schedule that stores ``job`` (an immediate job's message) until ``due``.

    The job's own headers ride on the schedule and so on the job it fires; the server strips
    ``Nats-Msg-Id`` from a fired job, so the job id also travels as ``Jsw-Job-Id``. The
    schedule keeps ``Nats-Msg-Id``: enqueueing the same delayed job id twice inside the dedup
    window stores one schedule.
    """
    at = due_ms(due)
    job_id = job.headers.get(MSG_ID) or job.headers[JOB_ID]
    headers = dict(job.headers)
    headers[SCHEDULE] = at_expression(datetime.fromtimestamp(at / 1000, UTC))
    headers[SCHEDULE_TARGET] = job.subject
    headers[JOB_ID] = job_id
    headers[SCHEDULED_FOR] = str(at)
    if EXPECTED_LAST_SUBJECT_SEQ in headers:
        # A unique job: no other schedule of its id may exist, whatever its due time.
        headers[EXPECTED_LAST_SUBJECT_SEQ_SUBJECT] = namespace.delayed_filter(job_id=job_id)
    return OutMessage(namespace.delayed_subject(queue, at, job_id), job.body, headers)


class DelayedJobs:
    """The producer's part of delayed jobs (a :class:`jsworker.producer.DelayedStore`): the
    server must keep message schedules, and a job is stored as one firing at its due time."""

    def check(self, conn: Connection) -> None:
        """:class:`~jsworker.ServerVersionError` on a server without message schedules: it
        would store the schedule as a plain message on a subject no worker reads."""
        conn.require_version("delayed jobs", DELAYED_SINCE)

    def message(self, namespace: Namespace, queue: str, job: OutMessage, due: datetime) -> OutMessage:
        """The schedule that stores ``job`` until ``due`` (see :func:`delayed_message`)."""
        return delayed_message(namespace, queue, job, due)


async def cancel_delayed(app: AppView, conn: Connection, job_id: str) -> tuple[str, str] | None:
    """Remove every schedule of delayed job ``job_id`` that has not fired; the queue and task
    of the one removed, or None when none was.

    The schedule is deleted first, then the firing claimed as cancelled: a copy the server
    fired in the instant before the delete is then dropped by the worker that receives it,
    unless a worker had already claimed it (the job is running: too late, None).
    """
    ns = app.namespace
    stream = LimitsStream(conn, ns.stream)
    cancelled: tuple[str, str] | None = None
    seq = 1
    while (found := await stream.next(ns.delayed_filter(job_id=job_id), seq)) is not None:
        seq = found.seq + 1
        parsed = ns.parse_delayed_subject(found.subject)
        if parsed is None or not await stream.delete(found.seq):
            continue  # fired (or removed) since it was read
        queue, due, _ = parsed
        if await claim(conn, ns, job_id, due, CANCELLED) is None:
            task = found.headers.get(TASK, "")
            cancelled = (queue, task)
            # Label values and event subjects only take names the app declares.
            label = task if task in app.tasks else UNKNOWN
            app.metrics.cancelled.labels(queue, label).inc()
            if app.options.events:
                await EventEmitter(conn, ns, app.metrics).emit("cancelled", queue, label, job_id)
    return cancelled
