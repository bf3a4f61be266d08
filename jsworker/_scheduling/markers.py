"""Markers: how a unique delayed job holds its key in the job stream while its schedule waits
in the schedules stream.

A unique enqueue is one publish, refused by the server while anything on
:meth:`~jsworker._wire.names.Namespace.unique_filter` holds the key in the first job stream:
the job queued or running, the delayed job not yet made a schedule, or, once a worker made it
one, the marker that worker wrote beside it. The marker is written before the delayed job's own
message goes (so that one of the two always holds the key) and removed once the fired job is in
its queue (which then holds the key itself), or when the job is cancelled.

A marker can outlive its job: a worker stopped between a cancel's two deletes, or a schedule
made by an earlier version, whose firing does not say it is unique, given a marker by
:func:`mark_unmarked`. :class:`MarkerSweep` removes those once nothing else holds their key.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from .._errors import JsworkerError
from .._observability.logging import get_logger
from .._wire.headers import EXPECTED_LAST_SUBJECT_SEQ, JOB_ID, MSG_ID, SCHEDULE_TARGET, TASK, UNIQUE
from ..jetstream.limits_stream import LimitsStream, StoredMessage
from ..jetstream.message import OutMessage, Stored
from ..jetstream.pipeline import store_each

if TYPE_CHECKING:
    from .._core.view import AppView
    from .._wire.names import Namespace
    from ..jetstream.connection import Connection

log = get_logger("jsworker.schedules")

# How often a worker looks for markers nothing else holds the key of, and how old one must be:
# well past the moves, which write and remove a marker within a batch's round trips.
SWEEP_EVERY = 30.0
SWEEP_AGE = 60.0


def marker_message(namespace: Namespace, queue: str, task: str, job_id: str, due: int) -> OutMessage:
    """The marker of unique delayed job ``job_id`` of ``task``, whose schedule fires it into
    ``queue`` at ``due`` (unix ms). Its dedup key makes a move done again write it once. One
    key has one schedule at a time, so every marker of an id is that schedule's."""
    headers = {MSG_ID: f"mark-{job_id}-{due}", JOB_ID: job_id, TASK: task}
    return OutMessage(namespace.mark_subject(queue, task, job_id), b"", headers)


async def remove_markers(conn: Connection, namespace: Namespace, job_id: str) -> None:
    """Delete every marker of ``job_id``."""
    jobs = LimitsStream(conn, namespace.stream)
    seq = 1
    while (found := await jobs.next(namespace.mark_filter(job_id), seq)) is not None:
        await jobs.delete(found.seq)
        seq = found.seq + 1


def _unmarked(namespace: Namespace, schedule: StoredMessage) -> OutMessage | None:
    """The marker a unique delayed job's schedule made by an earlier version needs, else None
    (a schedule this version made says it is unique; its worker wrote the marker)."""
    if EXPECTED_LAST_SUBJECT_SEQ not in schedule.headers or UNIQUE in schedule.headers:
        return None
    parsed = namespace.parse_delayed_subject(schedule.subject)
    target = schedule.headers.get(SCHEDULE_TARGET, "")
    job = namespace.parse_job_subject(namespace.unfired_subject(target)) if target.count(".") == 5 else None
    if parsed is None or job is None:
        return None
    queue, due, job_id = parsed
    return marker_message(namespace, queue, job[1], job_id, due)


async def mark_unmarked(app: AppView, conn: Connection, dry_run: bool = False) -> int:
    """Write the markers of the unique delayed jobs scheduled by an earlier version (which kept
    no marker, and whose unique enqueues looked for schedules instead); how many lacked one.
    Run once, after the workers and before the producers are upgraded. ``dry_run``: only
    count them (``jsworker doctor``)."""
    ns = app.namespace
    schedules, jobs = LimitsStream(conn, ns.schedules_stream), LimitsStream(conn, ns.stream)
    missing: list[OutMessage] = []
    seq = 1
    while (found := await schedules.next(ns.delayed_filter(), seq)) is not None:
        seq = found.seq + 1
        marker = _unmarked(ns, found)
        if marker is not None and await jobs.next(ns.mark_filter(marker.headers[JOB_ID])) is None:
            missing.append(marker)
    if not dry_run:
        for answer in await store_each(conn, missing):
            if not isinstance(answer, Stored):
                raise JsworkerError(f"cannot write a marker: {answer}")
    return len(missing)


class MarkerSweep:
    """Removes the markers that no longer stand for a schedule: one whose key nothing else
    holds (no job queued or running, no delayed job, schedule or fired job of its id) and that
    is old enough not to be a move in progress. A worker service of apps with unique tasks."""

    def __init__(self, app: AppView, conn: Connection) -> None:
        self.app, self.conn = app, conn

    async def run(self) -> None:
        """Sweep every :data:`SWEEP_EVERY` seconds until cancelled."""
        while True:
            await asyncio.sleep(SWEEP_EVERY)
            try:
                await self.sweep()
            except JsworkerError as exc:
                log.warning("markers.unswept", error=str(exc))

    async def sweep(self, age: float = SWEEP_AGE) -> int:
        """Remove the markers left behind at least ``age`` seconds old; how many went."""
        ns = self.app.namespace
        jobs = LimitsStream(self.conn, ns.stream)
        removed, seq = 0, 1
        while (marker := await jobs.next(ns.mark_subjects, seq)) is not None:
            seq = marker.seq + 1
            if marker.stored_at is not None and marker.stored_at > time.time() - age:
                break  # stored in order: the rest are younger
            if await self._held_elsewhere(marker) or not await jobs.delete(marker.seq):
                continue
            removed += 1
            log.info("markers.removed", job_id=marker.headers.get(JOB_ID, ""))
        return removed

    async def _held_elsewhere(self, marker: StoredMessage) -> bool:
        """Whether anything but ``marker`` holds its key: read in the order a job moves
        (enqueued, scheduled, fired, queued), so that one moving between reads is seen."""
        ns = self.app.namespace
        parsed = ns.parse_mark_subject(marker.subject)
        job_id = marker.subject.rsplit(".", 1)[-1]
        if parsed is None:
            return False
        queue, task = parsed
        jobs, schedules = LimitsStream(self.conn, ns.stream), LimitsStream(self.conn, ns.schedules_stream)
        places = (
            (jobs, ns.later_filter(job_id=job_id)),
            (schedules, ns.delayed_filter(job_id=job_id)),
            (schedules, ns.fired_subject(ns.job_subject(queue, task, job_id))),
            (jobs, ns.job_filter(job_id)),
        )
        for stream, subjects in places:
            if await stream.next(subjects) is not None:
                return True
        return False
