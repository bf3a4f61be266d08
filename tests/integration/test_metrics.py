"""Metrics, read from a real worker's /metrics endpoint after a known mix of outcomes."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from prometheus_client import CollectorRegistry

import jsworker
from jsworker.testing import NatsServer

from ..support import wait_consumer_settled, wait_until
from .workers import APPS, Samples, scrape, start_metrics_worker, stop, value, worker_env

sys.path.insert(0, str(APPS))
import metrics_app


@pytest.fixture
def worker(nats_server: NatsServer, tmp_path: Path) -> Iterator[int]:
    """A worker of metrics_app serving metrics on a free port; yields the port."""
    env = worker_env(nats_server.url)
    proc, port = start_metrics_worker(
        env, tmp_path / "worker.log", "metrics_app", "-c", "7", "--log-level", "warning"
    )
    try:
        yield port
    finally:
        stop(proc)


def _key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))


def _differences(
    samples: Samples, expected: dict[tuple[str, tuple[tuple[str, str], ...]], float]
) -> dict[str, tuple[float, float]]:
    """(got, expected) of every sample that is not as expected, absent ones counting as 0."""
    return {
        f"{name}{dict(labels)}": (samples.get((name, labels), 0.0), want)
        for (name, labels), want in expected.items()
        if samples.get((name, labels), 0.0) != want
    }


async def _publish_unknown(url: str) -> None:
    nc = await nats.connect(url)
    try:
        await nc.jetstream().publish(
            "jsw.met.q.default.ghost", b'{"args":[],"kwargs":{}}', headers={"Nats-Msg-Id": "ghost"}
        )
    finally:
        await nc.close()


@pytest.mark.slow
def test_metrics_count_a_known_mix_of_outcomes(nats_server: NatsServer, worker: int) -> None:
    """5 successes, 2 jobs retried once, 1 job timing out twice, 1 rejection, 1 unknown task."""
    app = metrics_app.app
    app.servers = [nats_server.url]
    registry = CollectorRegistry()
    producer_metrics = app.metrics
    try:
        app.metrics = type(producer_metrics)(registry)  # the producer's own counts, apart
        metrics_app.ok.delay_many([() for _ in range(5)])
        metrics_app.flaky.delay()
        metrics_app.flaky.delay()
        metrics_app.slow.delay()
        metrics_app.refuse.delay()
        dup = metrics_app.ok.apply(job_id="same")
        metrics_app.ok.apply(job_id="same")
        assert not dup.duplicate
        asyncio.run(_publish_unknown(nats_server.url))

        # Once the queue is settled nothing more runs: the counters are heading for their final
        # values, and one that overshoots never matches.
        wait_consumer_settled(nats_server.url, "JSW_MET", "default")
        d = {"queue": "default"}
        final: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {
            _key("jsworker_jobs_succeeded_total", **d, task="ok"): 6,
            _key("jsworker_jobs_succeeded_total", **d, task="flaky"): 2,
            _key("jsworker_jobs_started_total", **d, task="ok"): 6,
            _key("jsworker_jobs_started_total", **d, task="flaky"): 4,
            _key("jsworker_jobs_retried_total", **d, task="flaky"): 2,
            _key("jsworker_jobs_failed_total", **d, task="flaky"): 0,  # Retry is not a failure
            _key("jsworker_jobs_started_total", **d, task="slow"): 2,
            _key("jsworker_jobs_timed_out_total", **d, task="slow"): 2,
            _key("jsworker_jobs_retried_total", **d, task="slow"): 1,
            _key("jsworker_jobs_dead_lettered_total", **d, task="slow", outcome="timed_out"): 1,
            _key("jsworker_jobs_started_total", **d, task="refuse"): 1,
            _key("jsworker_jobs_dead_lettered_total", **d, task="refuse", outcome="rejected"): 1,
            _key("jsworker_jobs_dead_lettered_total", **d, task="_unknown", outcome="bad_input"): 1,
            _key("jsworker_jobs_started_total", **d, task="_unknown"): 0,
            _key("jsworker_job_duration_seconds_count", **d, task="ok"): 6,
            _key("jsworker_job_queue_wait_seconds_count", **d, task="ok"): 6,
            _key("jsworker_job_queue_wait_seconds_count", **d, task="flaky"): 2,  # first attempts only
            _key("jsworker_jobs_in_flight"): 0,
        }
        s = wait_until(
            lambda: scrape(worker),
            until=lambda samples: not _differences(samples, final),
            timeout=30,
            message=f"the counters to reach {final}",
        )

        def v(name: str, **labels: str) -> float:
            return value(s, name, **labels)

        assert v("jsworker_jobs_in_flight") == 0
        assert v("jsworker_concurrency_limit") == 7
        assert v("jsworker_worker_info", version=jsworker.__version__, app="met", queues="default") == 1
        assert v("jsworker_pull_requests_total", queue="default") >= 1
        assert not [key for key in s if any(label == "job_id" for label, _ in key[1])]
        # Server-side figures are read every few seconds, not per scrape.
        s = wait_until(
            lambda: scrape(worker),
            until=lambda samples: value(samples, "jsworker_dead_letters") == 3,
            timeout=15,
            message="the dead-letter gauge",
        )
        assert v("jsworker_queue_pending", queue="default") == 0
        assert v("jsworker_queue_ack_pending", queue="default") == 0
        assert v("jsworker_queue_waiting_pulls", queue="default") >= 1
        assert v("jsworker_queue_oldest_pending_age_seconds", queue="default") == 0
        p = {
            (smp.name, tuple(sorted(smp.labels.items()))): smp.value
            for family in registry.collect()
            for smp in family.samples
        }
        assert value(p, "jsworker_jobs_enqueued_total", **d, task="ok") == 6
        assert value(p, "jsworker_enqueue_duplicates_total", **d, task="ok") == 1
        assert value(p, "jsworker_enqueue_duration_seconds_count", **d, task="ok") == 3
    finally:
        app.metrics = producer_metrics
        app.close()


@pytest.mark.slow
def test_counters_start_at_0_and_stale_queue_figures_go(nats_server: NatsServer, worker: int) -> None:
    """Before any job, a fresh worker exports every job counter of its tasks at 0, dead letters
    of every outcome included (so an alert's increase() sees the first one); when the server
    goes away, the queue's figures are dropped and jsworker_queue_reachable says 0 instead of
    the backlog freezing at its last value."""
    s = wait_until(
        lambda: scrape(worker),
        until=lambda samples: value(samples, "jsworker_queue_reachable", queue="default") == 1,
        timeout=15,
        message="a first read of the server's figures",
    )
    for task in metrics_app.app.tasks:
        labels = {"queue": "default", "task": task}
        assert s[_key("jsworker_jobs_started_total", **labels)] == 0, task
        assert s[_key("jsworker_enqueue_failures_total", **labels)] == 0, task
        for outcome in ("failed", "retry", "timed_out", "rejected", "bad_input", "poison"):
            assert s[_key("jsworker_jobs_dead_lettered_total", **labels, outcome=outcome)] == 0, (
                task,
                outcome,
            )
    assert s[_key("jsworker_queue_pending", queue="default")] == 0

    nats_server.stop()
    s = wait_until(
        lambda: scrape(worker),
        until=lambda samples: value(samples, "jsworker_queue_reachable", queue="default") == 0,
        timeout=30,
        message="the worker to find the server unreachable",
    )
    assert _key("jsworker_queue_pending", queue="default") not in s
    assert _key("jsworker_dead_letters") not in s


def test_failed_enqueues_are_counted() -> None:
    """An enqueue that raises EnqueueError counts its jobs in jsworker_enqueue_failures_total."""
    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        url = f"nats://127.0.0.1:{closed.getsockname()[1]}"
        app = jsworker.App("nowhere", url, connect_timeout=0.5, metrics_registry=CollectorRegistry())

        @app.task
        async def charge() -> None: ...

        try:
            for _ in range(2):
                with pytest.raises(jsworker.EnqueueError):
                    charge.delay()
            with pytest.raises(jsworker.EnqueueError):
                charge.delay_many([() for _ in range(3)])
        finally:
            app.close()
    families = {smp.name: smp.value for family in app.metrics.registry.collect() for smp in family.samples
                if smp.labels.get("task") == "charge"}  # fmt: skip
    assert families["jsworker_enqueue_failures_total"] == 5
    assert families["jsworker_jobs_enqueued_total"] == 0
