"""The jsworker-events data source against a real nats-server: exactly the stream's events,
across partitions, with the export's columns; ``since``; bad options and a missing stream."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from jsworker import App
from jsworker._server import NatsServer
from jsworker.events import JobEvent
from jsworker.events._rows import SPARK_SCHEMA
from jsworker.spark._events_source import JobEventsDataSource, seq_ranges

from ..events_data import moment_after, store_events
from ..support import stream_state

pytestmark = pytest.mark.timeout(180)

N = 600


def _event(i: int) -> JobEvent:
    kind = ("enqueued", "started", "succeeded")[i % 3]
    return JobEvent(
        event=kind,
        job_id=f"job{i // 3}",
        task=("charge", "mail")[i % 2],
        queue="default",
        ts=1_790_000_000 + i,
        attempt=None if kind == "enqueued" else 1,
        duration=0.25 if kind == "succeeded" else None,
    )


@pytest.fixture(scope="module")
def events_app(nats_server_module: NatsServer, spark: Any) -> tuple[App, list[int]]:
    """An app whose events stream holds N events and one message that is not an event."""
    spark.dataSource.register(JobEventsDataSource)
    app = App("sparkev", nats_server_module.url, events=True)
    bodies: list[bytes | JobEvent] = [_event(i) for i in range(N)]
    bodies.insert(N // 2, b"garbage")
    seqs = asyncio.run(store_events(app, bodies))
    return app, [s for s, b in zip(seqs, bodies, strict=True) if isinstance(b, JobEvent)]


def _reader(spark: Any, app: App, **options: Any) -> Any:
    read = spark.read.format("jsworker-events").option("app", app.name).option("servers", app.servers[0])
    for key, value in options.items():
        read = read.option(key, value)
    return read.load()


def test_reads_exactly_the_stream_across_partitions(spark: Any, events_app: tuple[App, list[int]]) -> None:
    app, seqs = events_app
    df = _reader(spark, app, partitions=3)
    assert df.rdd.getNumPartitions() == 3
    got = sorted(r.seq for r in df.select("seq").collect())
    assert got == seqs and len(got) == N
    assert set(range(1, N + 2)) - set(got) == {N // 2 + 1}  # the garbage message
    assert df.schema.simpleString() == spark.createDataFrame([], SPARK_SCHEMA).schema.simpleString()
    first = df.where("seq = 1").collect()[0].asDict()
    assert first["event"] == "enqueued" and first["job_id"] == "job0" and first["attempt"] is None
    assert first["ts"] == datetime.fromtimestamp(1_790_000_000, UTC).replace(tzinfo=None)
    counts = {r.event: r["count"] for r in df.groupBy("event").count().collect()}
    assert counts == {"enqueued": N // 3, "started": N // 3, "succeeded": N // 3}


def test_since(spark: Any, events_app: tuple[App, list[int]]) -> None:
    app, _ = events_app
    stored = stream_state(app.servers[0], app.namespace.events_stream)
    since = datetime.fromtimestamp(moment_after(app, stored.last_seq), UTC).isoformat()
    later = asyncio.run(store_events(app, [_event(i) for i in range(5)]))
    df = _reader(spark, app, since=since, partitions=2)
    assert sorted(r.seq for r in df.select("seq").collect()) == later
    assert _reader(spark, app, since="2999-01-01").count() == 0


def test_bad_options_and_missing_stream(spark: Any, events_app: tuple[App, list[int]]) -> None:
    app, _ = events_app
    with pytest.raises(Exception, match="partitions"):
        _reader(spark, app, partitions=0).count()
    with pytest.raises(Exception, match="not a time"):
        _reader(spark, app, since="soon").count()
    with pytest.raises(Exception, match="JSW_NOSUCH_EVENTS"):
        _reader(spark, App("nosuch", app.servers[0])).count()


def test_seq_ranges() -> None:
    assert [(r.lo, r.hi) for r in seq_ranges(1, 10, 3)] == [(1, 4), (5, 7), (8, 10)]
    assert [(r.lo, r.hi) for r in seq_ranges(5, 6, 4)] == [(5, 5), (6, 6)]
    assert seq_ranges(7, 6, 4) == []
