"""Per-task job metrics kept as plain numbers: what a scrape of them shows."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from jsworker.observability.metrics import Metrics


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
    # Outcomes that never happened are not exported (as with labelled prometheus-client counters).
    assert not any('outcome="poison"' in name for name in got)
    bucket = 'jsworker_job_duration_seconds_bucket{le="%s",queue="default",task="charge"}'
    assert got[bucket % "0.001"] == 1  # le is inclusive
    assert got[bucket % "0.0025"] == 2
    assert got[bucket % "1800.0"] == 2
    assert got[bucket % "+Inf"] == 3
    assert got[f"jsworker_job_duration_seconds_count{labels}"] == 3
    assert got[f"jsworker_job_duration_seconds_sum{labels}"] == 0.001 + 0.0011 + 7200.0


def test_tasks_are_apart_and_created_once() -> None:
    metrics = Metrics(CollectorRegistry())
    assert metrics.task("q", "a") is metrics.task("q", "a")
    metrics.task("q", "a").started += 1
    metrics.task("q", "b").started += 5
    got = _scrape(metrics)
    assert got['jsworker_jobs_started_total{queue="q",task="a"}'] == 1
    assert got['jsworker_jobs_started_total{queue="q",task="b"}'] == 5
