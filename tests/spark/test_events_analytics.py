"""job_report on a hand-made events DataFrame: exact counts, rates, percentiles, throughput."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from jsworker.events._rows import SPARK_SCHEMA
from jsworker.spark.analytics import format_report, job_report


def _at(minute: int, second: int) -> datetime:
    return datetime(2026, 11, 22, 10, minute, second, tzinfo=UTC)


def _event(
    seq: int,
    event: str,
    job: str,
    task: str = "charge",
    at: datetime | None = None,
    attempt: int | None = None,
    wait: float | None = None,
    duration: float | None = None,
) -> tuple[Any, ...]:
    ts = at or _at(0, seq)
    return (seq, event, job, task, "default", ts, attempt, "h:1", None, wait, duration, None, None, None)


EVENTS = [
    # a: succeeds at once
    _event(1, "enqueued", "a"),
    _event(2, "started", "a", attempt=1, wait=1.0),
    _event(3, "succeeded", "a", at=_at(0, 10), attempt=1, duration=0.1),
    # b: fails, is retried, succeeds; its second wait (a backoff) is not queueing
    _event(4, "enqueued", "b"),
    _event(5, "started", "b", attempt=1, wait=2.0),
    _event(6, "failed", "b", attempt=1, duration=0.2),
    _event(7, "retried", "b", attempt=1),
    _event(8, "started", "b", attempt=2, wait=50.0),
    _event(9, "succeeded", "b", at=_at(0, 50), attempt=2, duration=0.3),
    # c: fails and is dead-lettered
    _event(10, "enqueued", "c"),
    _event(11, "started", "c", attempt=1, wait=3.0),
    _event(12, "failed", "c", attempt=1, duration=0.4),
    _event(13, "dead_lettered", "c", attempt=1),
    # d: succeeds two minutes later
    _event(14, "enqueued", "d"),
    _event(15, "started", "d", attempt=1, wait=4.0),
    _event(16, "succeeded", "d", at=_at(2, 5), attempt=1, duration=0.5),
    # e: another task, dead-lettered without ever running (a bad body)
    _event(17, "dead_lettered", "e", task="mail", attempt=1),
]


@pytest.fixture(scope="module")
def report(spark: Any) -> list[Any]:
    events = spark.createDataFrame(EVENTS, SPARK_SCHEMA)
    return job_report(events).collect()


def test_counts_and_rates(report: list[Any]) -> None:
    charge, mail = (r.asDict() for r in report)
    assert {
        k: charge[k] for k in ("task", "jobs", "runs", "succeeded", "failed", "retried", "dead_lettered")
    } == {
        "task": "charge",
        "jobs": 4,
        "runs": 5,
        "succeeded": 3,
        "failed": 2,
        "retried": 1,
        "dead_lettered": 1,
    }
    assert charge["failure_rate"] == pytest.approx(2 / 5)
    assert charge["retry_rate"] == pytest.approx(1 / 4)
    assert charge["dead_letter_rate"] == pytest.approx(1 / 4)
    assert mail == {
        "task": "mail",
        "jobs": 1,
        "runs": 0,
        "succeeded": 0,
        "failed": 0,
        "retried": 0,
        "dead_lettered": 1,
        "failure_rate": None,
        "retry_rate": 0.0,
        "dead_letter_rate": 1.0,
        "run_p50": None,
        "run_p95": None,
        "run_p99": None,
        "wait_p50": None,
        "wait_p95": None,
        "wait_p99": None,
        "succeeded_per_minute_avg": None,
        "succeeded_per_minute_max": 0,
    }


def test_percentiles_and_throughput(report: list[Any]) -> None:
    charge = report[0]
    assert (charge.run_p50, charge.run_p95, charge.run_p99) == (0.3, 0.5, 0.5)
    # first attempts only: 1, 2, 3, 4 (b's 50 s second wait is left out)
    assert (charge.wait_p50, charge.wait_p95, charge.wait_p99) == (2.0, 4.0, 4.0)
    # two successes in 10:00, one in 10:02, none in 10:01 (not an active minute)
    assert (charge.succeeded_per_minute_avg, charge.succeeded_per_minute_max) == (1.5, 2)


def test_format_report(report: list[Any]) -> None:
    lines = format_report(report).splitlines()
    assert lines[0].split() == [
        *("TASK", "JOBS", "RUNS", "OK", "FAILED", "RETRIED", "DEAD", "FAIL%", "RETRY%", "DEAD%"),
        *("RUN", "p50/p95/p99", "WAIT", "p50/p95/p99", "OK/MIN", "avg/max"),
    ]
    assert lines[1].split() == [
        *("charge", "4", "5", "3", "2", "1", "1", "40.0", "25.0", "25.0"),
        *("300ms/500ms/500ms", "2s/4s/4s", "1.5/2"),
    ]
    assert lines[2].split() == [
        *("mail", "1", "0", "0", "0", "0", "1", "-", "0.0", "100.0"),
        "-/-/-",
        "-/-/-",
        "-/0",
    ]
    assert format_report([]) == "(no job events)"
