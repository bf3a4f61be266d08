"""Fired jobs (delayed jobs and ticks) in the worker: one runs only as the firing a worker
moved into its queue, once, and not after its tick expired."""

from __future__ import annotations

import time
from collections.abc import Awaitable
from datetime import datetime
from typing import TYPE_CHECKING

from ..._errors import JsworkerError
from ..._observability.logging import get_logger
from ..._observability.metrics import UNKNOWN
from ..._scheduling.claims import claim_holder
from ..._scheduling.declare import NEXT_TICK, tick_limit
from ..._wire.headers import FIRED_BY, FIRED_CLAIM, FIRED_NEXT, SCHEDULE, SCHEDULE_NAME, TICK_EXPIRES
from ...jetstream.limits_stream import LimitsStream
from ..execution import JobRun
from ..outcomes import Outcome, OutcomeKind
from ..pipeline import Interceptor

if TYPE_CHECKING:
    from ..._app import App
    from ...jetstream.connection import Connection

log = get_logger("jsworker.worker")

# How far ahead of its due time a fired job may arrive: the server and this machine's clocks
# may differ a little, and a catch-up tick names a slot up to half a second after it fired.
_EARLY = 30.0


class FiredJobs(Interceptor):
    """Lets a fired job run only as the firing a worker moved into its queue (see
    :mod:`jsworker._scheduling.relay`): the claim that worker wrote must still name it.

    Called only for jobs that carry ``Jsw-Fired-By``, after the job's own checks passed: other
    jobs pay nothing for it, fired ones one read.
    """

    name = "fired-jobs"

    def __init__(self, app: App, conn: Connection) -> None:
        self.app = app
        self.conn = conn

    def admit(self, job: JobRun) -> Awaitable[Outcome | None] | None:
        """Nothing for a job no schedule fired; else its check (:meth:`check`)."""
        return None if job.fired is None else self.check(job)

    async def check(self, job: JobRun) -> Outcome | None:
        """None when ``job`` may run; an outcome that ends it when no schedule of the app's
        fired it or its claim does not name it, that skips it when it is a unique task's tick
        while its key is held or a tick that expired."""
        fired = job.fired
        assert fired is not None
        task = job.task_name if job.task is not None else UNKNOWN
        foreign = self._foreign(job)
        mine = job.delivery.headers.get(FIRED_CLAIM)
        moved = False
        if mine and fired.kind != "unbound":
            try:
                held = await claim_holder(self.conn, self.app.namespace, fired.job_id, fired.due_ms)
            except JsworkerError as exc:
                log.warning("job.claim_unread", error=str(exc), **job.log_fields())
                return Outcome(OutcomeKind.SNOOZED, "its firing's claim could not be read", retry_delay=1.0)
            # The server holds what the worker that moved it wrote: a firing of the app's.
            moved = held == mine
        if foreign is None and not moved:
            foreign = f"marked as fired by {job.delivery.headers.get(FIRED_BY)}, which did not fire it"
        if foreign is not None:
            # The id it carries may not be its own (a forgery names its victim): its dead
            # letter and record go under its message instead, never touching the status or the
            # waiters of the job it names.
            job.job_id = f"seq-{job.delivery.stream_seq}"
            if moved:
                # A schedule of the app's that misfires (written by hand): it fires no more.
                # Never on a job's word alone: a forgery would name its victim's schedule.
                await self._remove_schedule(job)
            return Outcome(OutcomeKind.BAD_INPUT, foreign)
        if fired.kind == "periodic" and (late := _expired_tick(job)) is not None:
            return late
        if fired.kind == "periodic" and job.job_id != fired.job_id:
            holder = await self._key_holder(job)
            if holder is not None:
                self._dropped(job, task, "held", str(holder))
                return Outcome(OutcomeKind.SKIPPED, f"a unique task's tick while job {holder} holds its key")
        if job.attempt == 1:
            self.app.metrics.fired.labels(job.queue, task, fired.kind).inc()
        return None

    def _foreign(self, job: JobRun) -> str | None:
        """Why ``job`` was fired by no schedule the app installs, or None when it was.

        Schedules are made by workers and operators only, but a hand-written one (an operator's
        mistake) may fire more than once or name another job: a delayed job's firing must fire
        once and carry the id and due time its schedule's subject names; a tick must come from
        the periodic schedule its headers name.
        """
        fired = job.fired
        assert fired is not None
        headers = job.delivery.headers
        ns = self.app.namespace
        scheduler = headers.get(FIRED_BY, "")
        if fired.due_ms > (time.time() + _EARLY) * 1000:
            # Only a hand-made message is "fired" before its time; run, it would stand for a
            # later firing (a tick).
            return f"fired by {scheduler or 'an unnamed schedule'} before it was due"
        delayed = ns.parse_delayed_subject(scheduler)
        if delayed is not None:
            _, due_ms, job_id = delayed
            if headers.get(FIRED_NEXT) != "purge":
                return f"fired by {scheduler}, a delayed job's schedule that fires more than once"
            if fired.kind != "delayed" or (fired.job_id, fired.due_ms) != (job_id, due_ms):
                return f"fired by {scheduler} as another job than the one it names"
            return None
        name = ns.parse_periodic_subject(scheduler)
        if name is not None and fired.kind == "periodic" and headers.get(SCHEDULE_NAME) == name:
            return None
        return f"fired by {scheduler or 'an unnamed schedule'}, which is no schedule of this app's"

    async def _remove_schedule(self, job: JobRun) -> None:
        """Delete the schedule that fired ``job`` if it is still there, so it fires no more."""
        scheduler = job.delivery.headers.get(FIRED_BY, "")
        stream = LimitsStream(self.conn, self.app.namespace.schedules_stream)
        try:
            found = await stream.last(scheduler) if scheduler else None
            if found is not None and SCHEDULE in found.headers and await stream.delete(found.seq):
                log.warning("schedule.removed", schedule=scheduler, reason="not one jsworker installs")
        except JsworkerError as exc:
            log.warning("schedule.remove_failed", schedule=scheduler, error=str(exc))

    async def _key_holder(self, job: JobRun) -> int | None:
        """The stream sequence of an earlier message holding a unique tick's key (a job on its
        subject, or a delayed job of the key), which then holds the key; None when the tick is
        the first. The server refuses a second job of a key to producers, but fires ticks
        whatever waits."""
        ns = self.app.namespace
        # Ticks moved by an earlier version may wait in another partition, on their subject.
        held = ns.unique_filter(job.job_id) if job.stream_partition == 0 else job.delivery.subject
        try:
            stream = ns.partition_stream(job.stream_partition)
            first = await LimitsStream(self.conn, stream).next(held)
        except JsworkerError as exc:
            log.warning("job.key_unchecked", error=str(exc), **job.log_fields())
            return None
        if first is not None and first.seq < job.delivery.stream_seq:
            return first.seq
        return None

    def _dropped(self, job: JobRun, task: str, reason: str, held: str) -> None:
        self.app.metrics.fired_dropped.labels(job.queue, task, reason).inc()
        log.info("job.fired_dropped", reason=reason, claimed_by_seq=held, **job.log_fields())


def _expired_tick(job: JobRun) -> Outcome | None:
    """The outcome of a tick not started before its schedule's ``expires`` (by default, before
    the next tick was due), or None while it may run."""
    fired = job.fired
    assert fired is not None
    headers = job.delivery.headers
    following = headers.get(FIRED_NEXT)
    try:
        next_due = datetime.fromisoformat(following) if following else None
    except ValueError:
        next_due = None
    limit = tick_limit(headers.get(TICK_EXPIRES), fired.due_ms, next_due)
    if limit is None or time.time() <= limit:
        return None
    why = "the next tick was due" if headers.get(TICK_EXPIRES, NEXT_TICK) == NEXT_TICK else "its expiry"
    return Outcome(OutcomeKind.EXPIRED, f"a tick not started before {why}")
