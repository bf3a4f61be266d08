"""Prometheus metrics of producers, workers and the pull loop.

Every metric lives on the registry given to :class:`Metrics` (the process-wide default
registry unless told otherwise), so tests and embedding applications can keep their own.
Label values are queue and task names only, never job ids or arguments; a task name that is
not one of the app's (hostile input) is reported as ``_unknown``, so cardinality stays bounded
by what the code declares.
"""

from __future__ import annotations

import threading
import weakref
from typing import Protocol

from prometheus_client import REGISTRY as DEFAULT_REGISTRY
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .jobmetrics import DURATION_BUCKETS, JobMetrics, TaskMetrics
from .queuefigures import QueueFigures

UNKNOWN = "_unknown"
_QT = ("queue", "task")


class RunsJobs(Protocol):
    """Anything that can say how many jobs it is running (a worker)."""

    @property
    def in_flight(self) -> int:
        """Jobs running right now."""
        ...


class Metrics:
    """The metric families, created once per registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or DEFAULT_REGISTRY
        r = self.registry
        # Worker: per-task job outcomes and times, kept off prometheus-client's hot path.
        self.jobs = JobMetrics()
        r.register(self.jobs)
        self.in_flight = Gauge("jsworker_jobs_in_flight", "Jobs running in this worker.", registry=r)
        # Read when scraped, not kept up to date per job: two locked updates per job saved.
        self._workers: weakref.WeakSet[RunsJobs] = weakref.WeakSet()
        self.in_flight.set_function(lambda: sum(w.in_flight for w in list(self._workers)))
        self.concurrency = Gauge(
            "jsworker_concurrency_limit", "Jobs this worker runs at most at once.", registry=r
        )
        self.worker_info = Gauge(
            "jsworker_worker_info",
            "Always 1; labels describe the worker.",
            ("version", "app", "queues"),
            registry=r,
        )
        self.sync_overruns = Counter(
            "jsworker_sync_overruns",
            "Sync job runs whose thread went on past their timeout; the job waited for it.",
            _QT,
            registry=r,
        )
        # Pull loop.
        self.pulls = Counter("jsworker_pull_requests", "Pull requests sent.", ("queue",), registry=r)
        self.heartbeats_missed = Counter(
            "jsworker_pull_heartbeats_missed",
            "Pulls re-issued after missed heartbeats.",
            ("queue",),
            registry=r,
        )
        self.pull_restarts = Counter(
            "jsworker_pull_restarts",
            "Pull loops restarted (reconnect, consumer re-created).",
            ("queue",),
            registry=r,
        )
        self.reconnects = Counter("jsworker_reconnects", "Reconnections to NATS.", registry=r)
        self.partition_held = Counter(
            "jsworker_partition_waits",
            "Job starts that waited for a lease of their partition (each start once).",
            ("task",),
            registry=r,
        )
        self.rate_held = Counter(
            "jsworker_rate_limited",
            "Times a job start was refused a window of a rate limit and waited for the next.",
            ("limit",),
            registry=r,
        )
        # Fair queues: what the mover of a queue knows of its intake (0 on other workers).
        self.fair_waiting = Gauge(
            "jsworker_fair_jobs_waiting",
            "Jobs waiting in a fair queue's intake for their partition's turn, as its mover knows.",
            ("queue",),
            registry=r,
        )
        self.fair_partitions = Gauge(
            "jsworker_fair_partitions_waiting",
            "Partitions with jobs waiting in a fair queue's intake, as its mover knows.",
            ("queue",),
            registry=r,
        )
        self.loop_blocked = Counter(
            "jsworker_event_loop_blocked", "Times the worker's event loop was blocked too long.", registry=r
        )
        # Server-side state, read on an interval by the worker and dropped when stale.
        self.queue_figures = QueueFigures()
        r.register(self.queue_figures)
        self.questions_refused = Counter(
            "jsworker_questions_refused",
            "Questions to the workers dropped unanswered: their reply subject was outside the app's inboxes.",
            ("question",),
            registry=r,
        )
        self.events_dropped = Counter(
            "jsworker_events_dropped", "Job events that could not be sent (connection down).", registry=r
        )
        # Producers.
        self.enqueued = Counter("jsworker_jobs_enqueued", "Jobs stored by producers.", _QT, registry=r)
        self.duplicates = Counter(
            "jsworker_enqueue_duplicates", "Enqueues the server dropped as duplicates.", _QT, registry=r
        )
        self.enqueue_failures = Counter(
            "jsworker_enqueue_failures",
            "Jobs producers could not store (the enqueue raised EnqueueError).",
            _QT,
            registry=r,
        )
        self.enqueue_duration = Histogram(
            "jsworker_enqueue_duration_seconds",
            "Time one enqueue (or one bulk enqueue) took.",
            _QT,
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self._producer: dict[tuple[str, str], tuple[Counter, Counter, Histogram]] = {}
        # Schedules: delayed jobs stored and cancelled (producers), fired jobs taken up or
        # dropped unrun (workers).
        self.scheduled = Counter(
            "jsworker_jobs_scheduled", "Delayed jobs stored to run later.", _QT, registry=r
        )
        self.cancelled = Counter(
            "jsworker_jobs_cancelled",
            "Jobs cancelled: delayed ones before they fired, queued and running ones.",
            _QT,
            registry=r,
        )
        self.expired = Counter(
            "jsworker_jobs_expired", "Jobs not started before they expired: never run.", _QT, registry=r
        )
        self.fired = Counter(
            "jsworker_jobs_fired",
            "Jobs a schedule fired that a worker took up (kind: delayed or periodic).",
            (*_QT, "kind"),
            registry=r,
        )
        self.fired_dropped = Counter(
            "jsworker_fired_dropped",
            "Fired jobs dropped unrun (reason: duplicate, a second copy of one firing; cancelled, "
            "fired as it was being cancelled).",
            (*_QT, "reason"),
            registry=r,
        )
        self.schedules_restored = Counter(
            "jsworker_schedules_restored",
            "Declared periodic schedules a worker put back because the server no longer held them.",
            ("schedule",),
            registry=r,
        )
        self.workflow_forgeries = Counter(
            "jsworker_workflow_forgeries",
            "Forgeries a worker found and ignored (what: definition, a later message on a "
            "workflow's definition subject; step, a job claiming a workflow step it is not).",
            ("what",),
            registry=r,
        )
        for what in ("definition", "step"):
            # At 0 from the start, workflows on or not: the alert on forgeries reads it.
            self.workflow_forgeries.labels(what)
        self.jobs_restored = Counter(
            "jsworker_jobs_restored",
            "Jobs put back by a worker: their message was still stored past their queue "
            "consumer's ack floor, so the server would never have delivered it again.",
            ("queue",),
            registry=r,
        )
        self.leftover_schedules_removed = Counter(
            "jsworker_leftover_schedules_removed",
            "Delayed jobs' schedules the server kept after their job fired (a server killed as "
            "it fired), removed by a worker's sweep.",
            registry=r,
        )

    def count_in_flight(self, worker: RunsJobs) -> None:
        """Report ``worker.in_flight`` in ``jsworker_jobs_in_flight`` for as long as the worker
        exists; several workers in one process add up."""
        self._workers.add(worker)

    def declare_task(self, queue: str, task: str) -> None:
        """Start the producer counters of a declared task at 0, so that ``increase()`` in an
        alert sees its first failure (a series first scraped at 1 shows no increase)."""
        counters = (
            self.enqueued,
            self.duplicates,
            self.enqueue_failures,
            self.scheduled,
            self.cancelled,
            self.expired,
        )
        for counter in counters:
            counter.labels(queue, task)

    def declare_fired(self, queue: str, task: str) -> None:
        """Start the fired-job counters of a task a worker runs at 0 (each kind and reason),
        for the same reason as :meth:`declare_task`."""
        for kind in ("delayed", "periodic"):
            self.fired.labels(queue, task, kind)
        for reason in ("duplicate", "cancelled"):
            self.fired_dropped.labels(queue, task, reason)

    def producer(self, queue: str, task: str) -> tuple[Counter, Counter, Histogram]:
        """The enqueued, duplicates and enqueue-duration children of ``task``, looked up once."""
        key = (queue, task)
        found = self._producer.get(key)
        if found is None:
            found = self._producer[key] = (
                self.enqueued.labels(queue, task),
                self.duplicates.labels(queue, task),
                self.enqueue_duration.labels(queue, task),
            )
        return found

    def task(self, queue: str, task: str) -> TaskMetrics:
        """The job numbers of ``task`` on ``queue`` (pass UNKNOWN for names not declared)."""
        return self.jobs.task(queue, task)


_lock = threading.Lock()
_by_registry: dict[int, Metrics] = {}


def metrics_for(registry: CollectorRegistry | None = None) -> Metrics:
    """The :class:`Metrics` of ``registry`` (default: the process-wide one), created once.

    Several apps in one process share the families; prometheus-client refuses to register a
    name twice on one registry.
    """
    registry = registry or DEFAULT_REGISTRY
    with _lock:
        found = _by_registry.get(id(registry))
        if found is None:
            found = _by_registry[id(registry)] = Metrics(registry)
        return found
