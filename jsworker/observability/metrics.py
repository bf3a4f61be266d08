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

# From a 1 ms no-op to a 30 min batch job: one set that fits both ends.
DURATION_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0, 600.0, 1800.0,
)  # fmt: skip
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
        # Worker: one count per job outcome.
        self.started = Counter("jsworker_jobs_started", "Jobs a worker started running.", _QT, registry=r)
        self.succeeded = Counter("jsworker_jobs_succeeded", "Jobs that returned.", _QT, registry=r)
        self.failed = Counter(
            "jsworker_jobs_failed", "Job runs that raised (retried or not).", _QT, registry=r
        )
        self.retried = Counter("jsworker_jobs_retried", "Job runs given back for a retry.", _QT, registry=r)
        self.timed_out = Counter(
            "jsworker_jobs_timed_out", "Job runs cancelled by their timeout.", _QT, registry=r
        )
        self.dead_lettered = Counter(
            "jsworker_jobs_dead_lettered",
            "Jobs moved to the dead-letter stream, by outcome.",
            (*_QT, "outcome"),
            registry=r,
        )
        self.duration = Histogram(
            "jsworker_job_duration_seconds", "Time a job ran.", _QT, buckets=DURATION_BUCKETS, registry=r
        )
        self.queue_wait = Histogram(
            "jsworker_job_queue_wait_seconds",
            "Time from enqueue to start (first attempts only).",
            _QT,
            buckets=DURATION_BUCKETS,
            registry=r,
        )
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
        self.loop_blocked = Counter(
            "jsworker_event_loop_blocked", "Times the worker's event loop was blocked too long.", registry=r
        )
        # Server-side state, refreshed on an interval by the worker.
        self.pending = Gauge("jsworker_queue_pending", "Jobs waiting in the queue.", ("queue",), registry=r)
        self.ack_pending = Gauge(
            "jsworker_queue_ack_pending", "Jobs delivered and not yet settled.", ("queue",), registry=r
        )
        self.redelivered = Gauge(
            "jsworker_queue_redelivered",
            "Jobs delivered more than once, not yet settled.",
            ("queue",),
            registry=r,
        )
        self.waiting_pulls = Gauge(
            "jsworker_queue_waiting_pulls",
            "Pull requests waiting on the queue's consumer.",
            ("queue",),
            registry=r,
        )
        self.oldest_pending_age = Gauge(
            "jsworker_queue_oldest_pending_age_seconds",
            "Age of the oldest job not yet handed to a worker (0 when none).",
            ("queue",),
            registry=r,
        )
        self.dead_letters = Gauge("jsworker_dead_letters", "Messages in the dead-letter stream.", registry=r)
        self.events_dropped = Counter(
            "jsworker_events_dropped", "Job events that could not be sent (connection down).", registry=r
        )
        # Producers.
        self.enqueued = Counter("jsworker_jobs_enqueued", "Jobs stored by producers.", _QT, registry=r)
        self.duplicates = Counter(
            "jsworker_enqueue_duplicates", "Enqueues the server dropped as duplicates.", _QT, registry=r
        )
        self.enqueue_duration = Histogram(
            "jsworker_enqueue_duration_seconds",
            "Time one enqueue (or one bulk enqueue) took.",
            _QT,
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self._tasks: dict[tuple[str, str], TaskMetrics] = {}

    def count_in_flight(self, worker: RunsJobs) -> None:
        """Report ``worker.in_flight`` in ``jsworker_jobs_in_flight`` for as long as the worker
        exists; several workers in one process add up."""
        self._workers.add(worker)

    def task(self, queue: str, task: str) -> TaskMetrics:
        """The bound children for ``task`` on ``queue`` (pass UNKNOWN for names not declared)."""
        key = (queue, task)
        found = self._tasks.get(key)
        if found is None:
            found = self._tasks[key] = TaskMetrics(self, queue, task)
        return found


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


class TaskMetrics:
    """The children of one (queue, task) pair, bound once: label lookups stay off the hot path."""

    __slots__ = (
        "dead_lettered",
        "duration",
        "failed",
        "queue_wait",
        "retried",
        "started",
        "succeeded",
        "timed_out",
    )

    def __init__(self, metrics: Metrics, queue: str, task: str) -> None:
        self.started = metrics.started.labels(queue, task)
        self.succeeded = metrics.succeeded.labels(queue, task)
        self.failed = metrics.failed.labels(queue, task)
        self.retried = metrics.retried.labels(queue, task)
        self.timed_out = metrics.timed_out.labels(queue, task)
        self.duration = metrics.duration.labels(queue, task)
        self.queue_wait = metrics.queue_wait.labels(queue, task)
        self.dead_lettered = {
            outcome: metrics.dead_lettered.labels(queue, task, outcome)
            for outcome in ("failed", "retry", "timed_out", "rejected", "bad_input", "poison")
        }
