"""What a worker sets up before it takes its first job: its metrics and connection events,
the app's streams and consumers and periodic schedules, the connection job records go on,
its pull loops, and the services of the features that are on (the features' part in each job
is :mod:`.interceptors`)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from .._errors import ConfigurationError, JsworkerError, ProvisioningNeeded, ServerVersionError, TopologyError
from .._lifecycle.finals import FinalStates
from .._limits.fair import FairMover
from .._limits.overrides import RateFollower
from .._limits.rates import RateLimiter
from .._limits.spec import Rate
from .._observability.logging import get_logger
from .._scheduling.declare import DELAYED_SINCE, PERIODIC_SINCE
from .._scheduling.periodic import SchedulesRefused, sync_schedules
from .._scheduling.relay import relays
from .._version import __version__
from ..jetstream.connection import Connection, ConnectOptions
from ..jetstream.consume import EventHook, PullConsumer
from ..jetstream.delivery import Delivery
from .execution import JobRun
from .handbacks import HandBackCounts
from .jobbook import JobBook
from .observe import warn_replicas_differ
from .pipeline import Service
from .settings import WorkerSettings

if TYPE_CHECKING:
    from .._app import App


class _Running(Protocol):
    """What the metrics read of a worker."""

    @property
    def in_flight(self) -> int: ...

    @property
    def settings(self) -> WorkerSettings: ...


log = get_logger("jsworker.worker")

# How long a starting worker waits for streams and consumers while the server cannot answer.
_PROVISION_PATIENCE = 30.0


def announce(app: App, conn: Connection, worker: _Running, queues: list[str]) -> None:
    """Set the worker's metrics and log the connection's losses and returns."""
    metrics = app.metrics
    metrics.count_in_flight(worker)
    metrics.concurrency.set(worker.settings.concurrency)
    metrics.worker_info.labels(__version__, app.name, ",".join(queues)).set(1)
    # Every job counter of the tasks this worker runs starts at 0 (dead letters of each
    # outcome included): alerts use increase(), which cannot see a series' first sample.
    for task in app.tasks.values():
        if task.queue in queues:
            metrics.task(task.queue, task.name)
            metrics.declare_fired(task.queue, task.name)

    async def disconnected() -> None:
        # A connection being closed reports its end as a disconnect too: not worth a warning.
        if not conn.is_closed:
            log.warning("worker.disconnected")

    async def reconnected() -> None:
        metrics.reconnects.inc()
        log.info("worker.reconnected")

    conn.on_disconnect(disconnected)
    conn.on_reconnect(reconnected)


async def provision(app: App, conn: Connection, queues: list[str]) -> None:
    """Create or check the app's streams and the consumers of ``queues``.

    Where the server refuses this user a stream's create or update (its users hold the printed
    permissions: only the provisioner's may), a stream missing or out of date stops the worker
    with :class:`ProvisioningNeeded`, naming the provisioning step."""
    # A worker may start while its cluster elects a JetStream leader: wait that out, but
    # give up at once on a refusal (a conflicting stream will not fix itself).
    deadline = time.monotonic() + _PROVISION_PATIENCE
    while True:
        try:
            differ = await app.provision(conn, queues)
            break
        except ProvisioningNeeded as exc:
            log.error("worker.provisioning_needed", stream=exc.stream, change=exc.change)
            raise
        except TopologyError as exc:
            if not exc.transient or time.monotonic() > deadline:
                raise
            log.warning("worker.provision_retry", error=str(exc))
            await asyncio.sleep(1.0)
    for stream in differ:
        warn_replicas_differ(stream)  # once per start


async def records_connection(
    app: App, conn: Connection, options: ConnectOptions, queues: list[str]
) -> Connection:
    """The connection job records are written on: one of their own when every job has one
    (final states kept, or a task of ``queues`` keeps results), else ``conn``."""
    every = app.options.final_states or any(
        t.options.store_result for t in app.tasks.values() if t.queue in queues
    )
    if not every:
        return conn
    # The server reads a connection's messages in order: a batch of records being stored
    # would hold up the pull requests and acks behind it (bench lifecycle: 3 % of the rate).
    purpose = dataclasses.replace(options, name=f"{options.name}:records")
    return await Connection.open(purpose)


def services(app: App, conn: Connection, queues: list[str]) -> list[Service]:
    """What the features run beside the pull loops that is no job's (a job's are its
    interceptors'): the relays of delayed and fired jobs, a mover for each fair queue of
    ``queues`` (standing by while another worker's moves), and the app's final-state
    handlers."""
    found: list[Service] = []
    if conn.server_version >= DELAYED_SINCE:
        # Delayed jobs into schedules, fired jobs into their queues: whichever worker is free.
        found += relays(app, conn)
    if app.final_state_specs(conn.server_version):
        found += [FinalStates(app, conn, name, fn).run for name, fn in app.hooks.final_states.items()]
    for queue in sorted(app.fair_queues.intersection(queues)):
        found.append(FairMover(conn, app.namespace, queue, _fair_report(app, queue)).run)
    return found


def _fair_report(app: App, queue: str) -> Callable[[int, int], None]:
    """Sets the fair-queue gauges of ``queue`` to what its mover knows."""
    jobs, partitions = app.metrics.fair_waiting.labels(queue), app.metrics.fair_partitions.labels(queue)

    def report(waiting: int, active: int) -> None:
        jobs.set(waiting)
        partitions.set(active)

    return report


def rate_limiters(app: App, conn: Connection) -> dict[str, RateLimiter]:
    """A limiter for each of the app's rate limits, by scope (``q-<queue>``, ``t-<task>``)."""
    return {scope: _rate_limiter(app, conn, scope, rate) for scope, rate in app.rate_limits().items()}


def rate_follower(
    app: App, conn: Connection, queues: Iterable[str], rates: dict[str, RateLimiter]
) -> RateFollower:
    """What keeps ``rates`` (the queue rate limiters of a worker serving ``queues``) as set at
    run time (see :mod:`jsworker._limits.overrides`)."""
    declared = {q: (o.rate_limit if (o := app.queue_options.get(q)) else None) for q in queues}
    return RateFollower(rates, declared, lambda queue, rate: _rate_limiter(app, conn, f"q-{queue}", rate))


def _rate_limiter(app: App, conn: Connection, scope: str, rate: Rate) -> RateLimiter:
    # Each limit's series starts at 0 (labels() makes it): alerts use increase(), which cannot
    # see a series' first sample.
    return RateLimiter(conn, app.namespace, scope, rate, app.metrics.rate_held.labels(scope).inc)


def queue_consumer(
    app: App,
    conn: Connection,
    settings: WorkerSettings,
    pulled: tuple[str, int],
    limited: RateLimiter | None,
    on_event: EventHook,
    handler: Callable[[Delivery], bool] | None,
    limit: int | None,
    forgotten: Callable[[list[Delivery]], None] | None = None,
) -> PullConsumer:
    """The pull loop of ``pulled``: a queue and one of its partitions. A rate-limited queue
    pulls no more than a window of its limit allows, and its ``handler`` starts a job on
    arrival only with a start in hand; a fair queue's pull does not grow past
    ``--max-messages`` (the jobs a worker holds count against its turns' bound). The
    partitions of a queue share its bounds. ``limit``: the most jobs it hands out (a worker's
    job budget); ``forgotten`` is told of the messages it forgets (see
    :meth:`PullConsumer.forget_buffered`)."""
    queue, partition = pulled
    prefetch, grow_to = settings.prefetch, settings.prefetch_grows_to
    if (partitions := app.queue_streams(queue)) > 1:
        # The worker holds no more of a queue's jobs than with one partition: a share each
        # (at least one, so that every partition is pulled).
        prefetch = _share(prefetch, partition, partitions)
        grow_to = None if grow_to is None else _share(grow_to, partition, partitions)
    if limited is not None:
        # Growing while jobs go fast, as any queue, but never past a window's share.
        burst = limited.rate.burst
        prefetch, grow_to = min(prefetch, burst), None if grow_to is None else max(1, min(grow_to, burst))
    elif queue in app.fair_queues:
        grow_to = prefetch
    return PullConsumer(
        conn,
        app.namespace.partition_stream(partition),
        queue,
        max_messages=prefetch,
        grow_to=grow_to,
        expires=settings.expires,
        idle_heartbeat=settings.idle_heartbeat,
        on_event=on_event,
        handler=handler,
        limit=limit,
        # Well within the queue's ack_wait, and more than twice the heartbeats' interval.
        forget_after=0.8 * app.queue_ack_wait(queue),
        on_forgotten=forgotten,
    )


def _share(total: int, partition: int, partitions: int) -> int:
    """Partition ``partition``'s part of ``total`` split over ``partitions`` (they add up to
    ``total`` when it is at least ``partitions``)."""
    return max(1, total // partitions + (partition < total % partitions))


async def recheck(handbacks: HandBackCounts, book: JobBook, job: JobRun) -> None:
    """Read what tells a job's earlier runs apart, for a job that looks like it kills its
    workers: runs given back by stopping workers, or that failed or snoozed on their own, did
    not; the check then leaves them out."""
    await handbacks.read(job)
    await book.read_failures(job)


def served_queues(app: App, settings: WorkerSettings) -> list[str]:
    """The queues a worker serves: the settings' choice, or every queue of the app."""
    queues = list(settings.queues or app.queues)
    if not queues:
        raise ConfigurationError(f"app {app.name} has no tasks, so no queue to work on")
    unknown = sorted(set(queues) - set(app.queues))
    if unknown:
        # A queue no task uses would only leave a durable consumer behind on the server.
        raise ConfigurationError(
            f"no task of app {app.name} uses queue(s) {', '.join(unknown)}; "
            f"its queues: {', '.join(app.queues)}"
        )
    return queues


async def prepare(app: App, conn: Connection, worker: _Running, queues: list[str], schedules: bool) -> None:
    """Make the server ready for ``worker``: the streams and consumers of ``queues``, and the
    app's declared schedules when ``schedules``."""
    await app.connections.bind(conn)
    announce(app, conn, worker, queues)
    await provision(app, conn, queues)
    if schedules:
        await install_schedules(app, conn)


async def install_schedules(app: App, conn: Connection) -> None:
    """Reconcile the app's declared periodic schedules with the server, logging what changed.

    Never fails the worker: jobs keep running on a server too old for schedules or when the
    user may not write them; the error is logged. Each schedule is installed on its own: one
    the server refuses is logged (``schedule.refused``, with its name and the reason) and the
    others are installed all the same. Schedules on the server that this code does not
    declare are left alone (during a rolling deploy they are the other version's) and named
    in a warning; ``jsworker schedules sync --prune`` removes them.
    """
    try:
        if app.schedules:
            conn.require_version("periodic schedules", PERIODIC_SINCE)
        report = await sync_schedules(app, conn)
    except ServerVersionError as exc:
        log.error("schedules.unsupported", error=str(exc), schedules=sorted(app.schedules))
        return
    except SchedulesRefused as exc:
        report = exc.report
        for name, reason in report.refused.items():
            # The name and the server's words only: a schedule's arguments may be private.
            log.error("schedule.refused", schedule=name, reason=reason)
    except JsworkerError as exc:
        log.error("schedules.install_failed", error=str(exc))
        return
    if report.created or report.updated:
        log.info("schedules.installed", created=report.created, updated=report.updated)
    if report.stale:
        log.warning(
            "schedules.stale",
            schedules=report.stale,
            message="on the server but not declared by this code; left as they are "
            "(remove with: jsworker schedules sync MODULE --prune)",
        )
