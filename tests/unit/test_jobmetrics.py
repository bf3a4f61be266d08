"""Per-task job metrics kept as plain numbers: what a scrape of them shows."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from jsworker import App
from jsworker._core.queues import QueueStatus
from jsworker._observability.metrics import Metrics


def _scrape(metrics: Metrics) -> dict[str, float]:
    out = {}
    for line in generate_latest(metrics.registry).decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_counts_and_buckets_read_like_prometheus_client_metrics() -> None:
    metrics = Metrics(CollectorRegistry())
    m = metrics.task("default", "charge")
    m.started += 3
    m.succeeded += 2
    m.dead_lettered["rejected"] += 1
    for seconds in (0.001, 0.0011, 7200.0):  # on a bound, just over it, past the last one
        m.duration.observe(seconds)
    got = _scrape(metrics)
    labels = '{queue="default",task="charge"}'
    assert got[f"jsworker_jobs_started_total{labels}"] == 3
    assert got[f"jsworker_jobs_succeeded_total{labels}"] == 2
    assert got[f"jsworker_jobs_failed_total{labels}"] == 0
    assert got['jsworker_jobs_dead_lettered_total{outcome="rejected",queue="default",task="charge"}'] == 1
    # Outcomes that never happened are exported at 0 from the start, so that an alert's
    # increase() sees the first one.
    assert got['jsworker_jobs_dead_lettered_total{outcome="poison",queue="default",task="charge"}'] == 0
    bucket = 'jsworker_job_duration_seconds_bucket{le="%s",queue="default",task="charge"}'
    assert got[bucket % "0.001"] == 1  # le is inclusive
    assert got[bucket % "0.0025"] == 2
    assert got[bucket % "1800.0"] == 2
    assert got[bucket % "+Inf"] == 3
    assert got[f"jsworker_job_duration_seconds_count{labels}"] == 3
    assert got[f"jsworker_job_duration_seconds_sum{labels}"] == 0.001 + 0.0011 + 7200.0
    assert got[f"jsworker_job_queue_wait_seconds_count{labels}"] == 0  # no wait was known


def test_queue_waits_are_counted_in_the_same_buckets() -> None:
    metrics = Metrics(CollectorRegistry())
    m = metrics.task("q", "a")
    for duration in (0.002, 0.003):
        m.started += 1
        m.duration.observe(duration)
        m.queue_wait.observe(0.5)
    got = _scrape(metrics)
    labels = '{queue="q",task="a"}'
    assert got[f"jsworker_jobs_started_total{labels}"] == 2
    bucket = 'jsworker_job_queue_wait_seconds_bucket{le="%s",queue="q",task="a"}'
    assert got[bucket % "0.25"] == 0
    assert got[bucket % "0.5"] == 2
    assert got[f"jsworker_job_queue_wait_seconds_sum{labels}"] == 1.0
    assert got[f"jsworker_job_duration_seconds_sum{labels}"] == 0.005


def test_tasks_are_apart_and_created_once() -> None:
    metrics = Metrics(CollectorRegistry())
    assert metrics.task("q", "a") is metrics.task("q", "a")
    metrics.task("q", "a").started += 1
    metrics.task("q", "b").started += 5
    got = _scrape(metrics)
    assert got['jsworker_jobs_started_total{queue="q",task="a"}'] == 1
    assert got['jsworker_jobs_started_total{queue="q",task="b"}'] == 5


def test_queue_figures_are_dropped_while_the_server_cannot_be_read() -> None:
    """A failed read drops the server's figures instead of freezing them, and says so in
    jsworker_queue_reachable; the next good read brings them back."""
    metrics = Metrics(CollectorRegistry())
    figures = metrics.queue_figures
    figures.read(
        ["default", "idle"],
        [QueueStatus("default", pending=7, dead_letters=2), QueueStatus("other", dead_letters=1)],
    )
    got = _scrape(metrics)
    assert got['jsworker_queue_pending{queue="default"}'] == 7
    assert got['jsworker_queue_pending{queue="idle"}'] == 0  # no status: an empty queue
    assert 'jsworker_queue_pending{queue="other"}' not in got  # not this worker's queue
    assert got["jsworker_dead_letters"] == 3
    assert got['jsworker_queue_reachable{queue="default"}'] == 1

    figures.unreachable(["default", "idle"])
    got = _scrape(metrics)
    assert not any(name.startswith(("jsworker_queue_pending", "jsworker_dead_letters")) for name in got)
    assert got['jsworker_queue_reachable{queue="default"}'] == 0
    assert got['jsworker_queue_reachable{queue="idle"}'] == 0

    figures.read(["default", "idle"], [QueueStatus("default", pending=1)])
    got = _scrape(metrics)
    assert got['jsworker_queue_pending{queue="default"}'] == 1
    assert got['jsworker_queue_reachable{queue="default"}'] == 1


def test_declared_tasks_start_their_producer_counters_at_0() -> None:
    registry = CollectorRegistry()
    app = App("zeros", metrics_registry=registry)

    @app.task(queue="mail")
    def send() -> None: ...

    got = _scrape(app.metrics)
    labels = '{queue="mail",task="send"}'
    for family in (
        "jsworker_jobs_enqueued_total",
        "jsworker_enqueue_duplicates_total",
        "jsworker_enqueue_failures_total",
    ):
        assert got[family + labels] == 0, family
    # Job counters belong to the workers that run the task: none in a producer.
    assert not any(name.startswith("jsworker_jobs_started") for name in got)
