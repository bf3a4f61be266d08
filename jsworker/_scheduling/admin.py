"""Operating an app's periodic schedules from Python; ``jsworker schedules`` is built on it."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from .._enqueue.calls import new_job_id
from .._enqueue.producer import hold_key
from .._enqueue.receipt import Job
from .._wire.headers import (
    CONTENT_TYPE,
    ENQUEUED_AT,
    JOB_ID,
    MSG_ID,
    SCHEDULE_NAME,
    TASK,
)
from ..jetstream.publish import OutMessage, Publisher, SubjectTaken
from ..jetstream.session import OperatorSession
from .declare import DELAYED_SINCE, PERIODIC_SINCE, SchedulingApp, schedule_of
from .markers import mark_unmarked
from .periodic import (
    ScheduleNotFound,
    ScheduleState,
    SyncReport,
    put_schedule,
    read_schedule,
    read_schedules,
    remove_schedule,
    set_paused,
    sync_schedules,
)


class Schedules(OperatorSession[SchedulingApp]):
    """The periodic schedules of ``app`` on the server: list, sync, trigger, pause, resume,
    remove. Use as ``async with Schedules(app) as schedules:`` (or call :meth:`aclose`).

    Writing schedules needs nats-server 2.14 (:class:`~jsworker.ServerVersionError` before);
    an unknown name raises :class:`ScheduleNotFound`.
    """

    def __init__(self, app: SchedulingApp) -> None:
        super().__init__(app, "schedules")

    async def list(self) -> list[ScheduleState]:
        """Every periodic schedule of the app on the server, by name."""
        found = await read_schedules(self.app, await self.connection())
        return [found[name] for name in sorted(found)]

    async def sync(self, *, prune: bool = False) -> SyncReport:
        """Install the declared schedules (what every worker does at start); with ``prune``
        also remove the ones the app no longer declares."""
        conn = await self.connection()
        conn.require_version("periodic schedules", PERIODIC_SINCE)
        await self.app.provision_streams(conn)  # a first sync may come before any worker
        return await sync_schedules(self.app, conn, prune=prune)

    async def pause(self, name: str) -> bool:
        """Stop schedule ``name`` firing until :meth:`resume`; False when it was paused. A
        worker's reconcile keeps it paused, even when the code changes it."""
        return await self._set_paused(name, True)

    async def resume(self, name: str) -> bool:
        """Let paused schedule ``name`` fire again; False when it was not paused."""
        return await self._set_paused(name, False)

    async def _set_paused(self, name: str, paused: bool) -> bool:
        conn = await self.connection()
        conn.require_version("periodic schedules", PERIODIC_SINCE)
        return await set_paused(self.app, conn, name, paused)

    async def remove(self, name: str) -> bool:
        """Remove schedule ``name`` from the server; False when there was none."""
        return await remove_schedule(self.app, await self.connection(), name)

    async def put(self, name: str, spec: Mapping[str, Any]) -> str:
        """Create or change schedule ``name``, one the code does not declare, as ``spec`` says
        (see :func:`~.declare.schedule_of`): ``created``, ``updated`` or ``unchanged``."""
        conn = await self.connection()
        conn.require_version("periodic schedules", PERIODIC_SINCE)
        return await put_schedule(self.app, conn, schedule_of(self.app, name, spec))

    async def mark_unique(self, *, dry_run: bool = False) -> int:
        """Give a marker to each unique delayed job scheduled by an earlier version (see
        :func:`~.markers.mark_unmarked`); how many lacked one (``dry_run``: only count them)."""
        conn = await self.connection()
        conn.require_version("delayed jobs", DELAYED_SINCE)
        return await mark_unmarked(self.app, conn, dry_run=dry_run)

    async def trigger(self, name: str) -> Job:
        """Enqueue one job of schedule ``name`` now, with its task and arguments, outside its
        cadence (its next tick is unchanged). Its job id is ``<name>-manual-<random>``; for a
        unique task, its key's id, and while a job of that key waits or runs the receipt says
        ``duplicate=True`` instead."""
        conn = await self.connection()
        state = await read_schedule(self.app, conn, name)
        if state is None:
            raise ScheduleNotFound(f"no schedule named {name!r} on the server (app {self.app.name})")
        headers = {
            TASK: state.task,
            ENQUEUED_AT: str(time.time_ns()),
            CONTENT_TYPE: state.content_type,
            SCHEDULE_NAME: name,
        }
        if state.job_id is not None:
            # A unique task's: its key's id, refused by the server while a job of it waits or runs.
            job_id = headers[JOB_ID] = state.job_id
            hold_key(self.app.namespace, headers, job_id)
            partition = 0  # where unique jobs stay
        else:
            job_id = headers[MSG_ID] = f"{name}-manual-{new_job_id()[:12]}"
            partition = self.app.job_partition(state.queue, job_id)
        msg = OutMessage(
            self.app.namespace.job_subject(state.queue, state.task, job_id, partition), state.body, headers
        )
        try:
            stored = await Publisher(conn, retry_for=self.app.options.publish_timeout).publish(msg)
        except SubjectTaken:
            return Job(id=job_id, task=state.task, queue=state.queue, seq=0, duplicate=True)
        return Job(id=job_id, task=state.task, queue=state.queue, seq=stored.seq, duplicate=stored.duplicate)
