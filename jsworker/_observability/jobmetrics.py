"""Per-task job counters and histograms kept as plain numbers, exported when scraped.

A worker updates them once or more per job. prometheus-client's own metric objects take a
lock and several method calls per update, which made metrics a tenth of a no-op job's cost;
here an update is an integer addition on the event loop's thread, and the families are built
only when Prometheus scrapes. The exported names, labels and buckets are those of ordinary
prometheus-client counters and histograms.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

# From a 1 ms no-op to a 30 min batch job: one set that fits both ends.
DURATION_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0, 600.0, 1800.0,
)  # fmt: skip
DEAD_LETTER_OUTCOMES = ("failed", "retry", "timed_out", "rejected", "bad_input", "poison")

_COUNTERS = (
    ("started", "jsworker_jobs_started", "Jobs a worker started running."),
    ("succeeded", "jsworker_jobs_succeeded", "Jobs that returned."),
    ("failed", "jsworker_jobs_failed", "Job runs that raised (retried or not)."),
    ("retried", "jsworker_jobs_retried", "Job runs given back for a retry."),
    ("timed_out", "jsworker_jobs_timed_out", "Job runs cancelled by their timeout."),
    ("snoozed", "jsworker_jobs_snoozed", "Job runs that ended with Snooze: put back, no attempt spent."),
)
_HISTOGRAMS = (
    ("duration", "jsworker_job_duration_seconds", "Time a job ran."),
    ("queue_wait", "jsworker_job_queue_wait_seconds", "Time from enqueue to start (first attempts only)."),
)


class Distribution:
    """Counts of observations per duration bucket, and their sum."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(DURATION_BUCKETS) + 1)  # the last one is +Inf
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        """Add one observation (Prometheus buckets are inclusive: ``le`` means <=)."""
        self.counts[bisect_left(DURATION_BUCKETS, seconds)] += 1
        self.total += seconds


class TaskMetrics:
    """What happened to the jobs of one (queue, task) pair in this process."""

    __slots__ = ("dead_lettered", "duration", "failed", "queue_wait", "retried", "snoozed", "started",
                 "succeeded", "timed_out")  # fmt: skip

    def __init__(self) -> None:
        self.started = self.succeeded = self.failed = self.retried = self.timed_out = self.snoozed = 0
        self.dead_lettered = dict.fromkeys(DEAD_LETTER_OUTCOMES, 0)
        self.duration = Distribution()
        self.queue_wait = Distribution()


class JobMetrics(Collector):
    """The per-task metrics of one registry: :meth:`task` for updates, :meth:`collect` for scrapes."""

    def __init__(self) -> None:
        self._tasks: dict[tuple[str, str], TaskMetrics] = {}

    def task(self, queue: str, task: str) -> TaskMetrics:
        """The numbers of ``task`` on ``queue``, created on first use."""
        found = self._tasks.get((queue, task))
        if found is None:
            found = self._tasks[(queue, task)] = TaskMetrics()
        return found

    #: Label names of each family, as prometheus-client's own metric objects tell them.
    LABELS = {
        **{name: ("queue", "task") for _, name, _ in (*_COUNTERS, *_HISTOGRAMS)},
        "jsworker_jobs_dead_lettered": ("queue", "task", "outcome"),
    }

    def describe(self) -> Iterator[Metric]:
        """The families without samples (the registry checks names with it)."""
        return self._families([])

    def collect(self) -> Iterator[Metric]:
        """Build the families from the current numbers (called from the scraping thread)."""
        # list(): a worker may add a task while a scrape runs on another thread.
        return self._families(list(self._tasks.items()))

    def _families(self, tasks: list[tuple[tuple[str, str], TaskMetrics]]) -> Iterator[Metric]:
        for attr, name, doc in _COUNTERS:
            counter = CounterMetricFamily(name, doc, labels=("queue", "task"))
            for labels, m in tasks:
                counter.add_metric(labels, getattr(m, attr))
            yield counter
        dead = CounterMetricFamily(
            "jsworker_jobs_dead_lettered",
            "Jobs moved to the dead-letter stream, by outcome.",
            labels=("queue", "task", "outcome"),
        )
        for (queue, task), m in tasks:
            # Every outcome, zeros included: a series that appears at 1 hides its first increase.
            for outcome, count in list(m.dead_lettered.items()):
                dead.add_metric((queue, task, outcome), count)
        yield dead
        for attr, name, doc in _HISTOGRAMS:
            histogram = HistogramMetricFamily(name, doc, labels=("queue", "task"))
            for labels, m in tasks:
                dist: Distribution = getattr(m, attr)
                counts, total = list(dist.counts), dist.total
                buckets, running = [], 0
                for bound, count in zip((*map(str, DURATION_BUCKETS), "+Inf"), counts, strict=True):
                    running += count
                    buckets.append((bound, running))
                histogram.add_metric(labels, buckets, total)
            yield histogram
