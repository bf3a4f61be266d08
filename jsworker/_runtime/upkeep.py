"""The services a worker runs beside its pull loops: heartbeats for the jobs it holds, a
watch on its event loop, the server's queue figures for its metrics, a sweep of the
delayed-job schedules a killed server left behind, a watch that puts back the declared
periodic schedules the server lost, and one that puts back the jobs a queue's consumer no
longer hands out."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sized
from functools import partial
from typing import TYPE_CHECKING

from .._core.layout import relay_specs
from .._core.queues import QueueStatus, queue_status
from .._errors import JsworkerError
from .._lifecycle.orphans import OrphanWatch
from .._observability.logging import get_logger
from .._scheduling.declare import DELAYED_SINCE, PERIODIC_SINCE
from .._scheduling.leftovers import sweep_leftovers
from .._scheduling.periodic import restore_missing
from ..events._depth import DepthSampler
from ..jetstream.connection import Connection
from ..jetstream.consume import PullConsumer
from ..jetstream.rewind import REWIND_SINCE
from .execution import JobRun

if TYPE_CHECKING:
    from .._app import App

log = get_logger("jsworker.worker")

# Seconds between two looks at the event loop's lag.
_TICK = 0.25
#: Seconds between two sweeps of leftover schedules (:func:`leftover_schedules`).
LEFTOVER_INTERVAL = 60.0
#: Seconds between two checks that the server holds every declared periodic schedule
#: (:func:`missing_schedules`).
SCHEDULES_INTERVAL = 60.0


async def heartbeats(
    interval: float, jobs: Callable[[], Iterable[JobRun]], consumers: Callable[[], Iterable[PullConsumer]]
) -> None:
    """Every ``interval`` seconds (a third of the shortest ``ack_wait``), tell the server that
    each running and buffered job is still being worked on (``in_progress``). A consumer whose
    buffer went too long without (the process paused) forgets it instead: see
    :meth:`PullConsumer.beat`."""
    while True:
        await asyncio.sleep(interval)
        # Buffered messages count too: their ack timers started when they were delivered.
        for job in list(jobs()):
            await job.delivery.in_progress()
        for consumer in list(consumers()):
            for delivery in consumer.beat():
                await delivery.in_progress()


async def watch_event_loop(
    app: App, warn_after: float, counts: Counter[str], jobs: Callable[[], Iterable[JobRun]]
) -> None:
    """Count and log each time the event loop was held ``warn_after`` seconds or more,
    naming the async tasks that were running."""
    # An async task that blocks (CPU work, a sync client) stops everything on the loop:
    # pulls, acks and the heartbeats that keep other jobs alive. It cannot be preempted,
    # but it can be named, so the operator knows which task to fix.
    while True:
        before = time.monotonic()
        await asyncio.sleep(_TICK)
        lag = time.monotonic() - before - _TICK
        if lag >= warn_after:
            counts["event_loop_blocked"] += 1
            app.metrics.loop_blocked.inc()
            running = sorted({job.task_name for job in jobs() if job.task and job.task.is_async})
            log.warning("worker.event_loop_blocked", seconds=round(lag, 3), async_tasks_running=running)


async def server_stats(
    app: App,
    conn: Connection,
    queues: list[str],
    interval: float,
    on_read: Callable[[list[QueueStatus]], None] | None = None,
) -> None:
    """Read the server's figures of ``queues`` into the app's metrics every ``interval`` seconds
    (and, with job events on, sample them for the dashboard's depth chart); ``on_read`` is
    given each reading too."""
    # Read on an interval, not per scrape: a scrape must not cost server round trips, and
    # every worker of a fleet reports the same figures (dashboards take max by queue).
    figures = app.metrics.queue_figures
    # The same figures, sampled for the dashboard's depth chart (one sample per queue and slot
    # is stored, whatever the number of workers).
    depth = DepthSampler(conn, app.namespace) if app.options.events else None
    while True:
        try:
            statuses = await queue_status(app, conn)
        except JsworkerError as exc:
            log.debug("worker.server_stats_failed", error=str(exc))
            figures.unreachable(queues)
        else:
            figures.read(queues, statuses)
            if on_read is not None:
                on_read(statuses)
            if depth is not None:
                await depth.sample(s for s in statuses if s.queue in queues)
        await asyncio.sleep(interval)


async def leftover_schedules(app: App, conn: Connection, interval: float | None = None) -> None:
    """Every ``interval`` seconds (default :data:`LEFTOVER_INTERVAL`), remove the delayed-job
    schedules the server kept after their job fired (see :mod:`jsworker._scheduling.leftovers`)."""
    interval = LEFTOVER_INTERVAL if interval is None else interval
    # The first sweep at a random point of the first interval: a fleet started (or restarted)
    # at once does not list the delayed jobs all in the same instant, every interval after.
    await asyncio.sleep(random.uniform(0, interval))
    while True:
        # Checked each time: a reconnect may land on another server of the cluster.
        if conn.server_version >= DELAYED_SINCE:
            try:
                removed = await sweep_leftovers(conn, app.namespace)
            except JsworkerError as exc:
                # Next interval tries again; a leftover only inflates a count meanwhile.
                log.debug("worker.leftover_schedules_failed", error=str(exc))
            else:
                if removed:
                    app.metrics.leftover_schedules_removed.inc(removed)
                    log.info("worker.leftover_schedules_removed", count=removed)
        await asyncio.sleep(interval)


async def missing_schedules(app: App, conn: Connection, keep: bool) -> None:
    """Every :data:`SCHEDULES_INTERVAL` seconds, put back the declared periodic schedules the
    server no longer holds: a schedule that vanished (a purge of the job stream, a rollup, a
    removal) would otherwise fire no more until a worker starts. Each one put back is counted
    (``jsworker_schedules_restored_total``) and logged. Only a worker that installs the
    schedules (``keep``: not ``--no-schedules``) keeps them."""
    if not keep or not app.schedules:
        return
    for name in app.schedules:
        app.metrics.schedules_restored.labels(name)  # at 0: increase() sees the first one
    while True:
        # At a random point of each interval: the workers of a fleet do not all look at once.
        await asyncio.sleep(random.uniform(0.5, 1.0) * SCHEDULES_INTERVAL)
        if conn.server_version < PERIODIC_SINCE:
            continue
        try:
            restored = await restore_missing(app, conn)
        except JsworkerError as exc:
            log.debug("worker.schedules_check_failed", error=str(exc))
            continue
        for name in restored:
            app.metrics.schedules_restored.labels(name).inc()
        if restored:
            log.warning(
                "schedules.restored", schedules=restored, message="declared, but gone from the server"
            )


async def orphaned_jobs(
    app: App, conn: Connection, pulled: Callable[[], Iterable[tuple[str, int]]], interval: float
) -> None:
    """Every ``interval`` seconds, put back the jobs of the queues this worker pulls (``pulled``:
    queue and partition) that their consumer passed without an acknowledgement, and hand out
    again what the relays' consumers passed (see :mod:`jsworker._lifecycle.orphans`); each is
    counted (``jsworker_jobs_restored_total``, by queue or by relay consumer)."""
    watch = OrphanWatch(app, conn)
    relays = relay_specs(app, conn.server_version) if conn.server_version >= REWIND_SINCE else []
    unsubscribe = conn.on_reconnect(watch.reconnected)
    try:
        while True:
            # At a random point of each interval: the workers of a fleet do not all look at once.
            await asyncio.sleep(random.uniform(0.5, 1.0) * interval)
            looks: list[tuple[str, Callable[[], Awaitable[Sized]]]] = [
                (queue, partial(watch.look, queue, partition)) for queue, partition in list(pulled())
            ]
            looks += [
                (spec.name, partial(watch.look_relay, spec.stream, spec.name, spec.filter_subject))
                for spec in relays
            ]
            for label, look in looks:
                # At 0 from the first look, which never puts a job back: increase() sees the first.
                restored_count = app.metrics.jobs_restored.labels(label)
                try:
                    restored = await look()
                except JsworkerError as exc:
                    # The next look tries again (a leader change, a restarting server).
                    log.debug("worker.orphan_check_failed", consumer=label, error=str(exc))
                    continue
                if restored:
                    restored_count.inc(len(restored))
    finally:
        unsubscribe()
