"""spark.readStream.format("jsworker-events") against a real nats-server: a restarted query
goes on from its checkpoint with no gap and no repeat, ``maxEventsPerTrigger`` bounds every
micro-batch, a query killed mid-stream loses and repeats nothing, bad options are named, and
events that expired unread are skipped with a warning."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
import pytest
import structlog
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from pyspark.sql.types import StructType

from jsworker import App
from jsworker._errors import HistoryError
from jsworker._server import NatsServer
from jsworker.events import JobEvent
from jsworker.spark._events_source import JobEventsDataSource, JobEventsStreamReader

from ..events_data import moment_after, store_events

pytestmark = pytest.mark.timeout(300)

# (batch id, the (seq, job_id) of each row), as foreachBatch saw them.
Batch = tuple[int, list[tuple[int, str]]]


def _events(start: int, count: int) -> list[bytes | JobEvent]:
    return [
        JobEvent(
            event=("enqueued", "started", "succeeded")[i % 3],
            job_id=f"job{i // 3}",
            task="charge",
            queue="default",
            ts=1_790_000_000 + i,
        )
        for i in range(start, start + count)
    ]


@pytest.fixture(scope="module")
def server(nats_server_module: NatsServer, spark: Any) -> NatsServer:
    """The module's server, with the format registered in the shared session; each test
    has an app (an events stream) of its own."""
    spark.dataSource.register(JobEventsDataSource)
    return nats_server_module


def _stream(spark: Any, app: App, **options: Any) -> Any:
    read = (
        spark.readStream.format("jsworker-events").option("app", app.name).option("servers", app.servers[0])
    )
    for key, value in options.items():
        read = read.option(key, value)
    return read.load()


def _run(
    spark: Any,
    app: App,
    checkpoint: Path,
    batches: list[Batch],
    *,
    kill_at: int | None = None,
    **options: Any,
) -> None:
    """Read everything stored now (Trigger.AvailableNow) into ``batches``, from ``checkpoint``;
    batch ``kill_at``, once read, kills the query before Spark can commit it."""

    def collect(df: Any, batch_id: int) -> None:
        batches.append((batch_id, [(r.seq, r.job_id) for r in df.select("seq", "job_id").collect()]))
        if batch_id == kill_at:
            raise RuntimeError(f"killed in batch {batch_id}")

    query = (
        _stream(spark, app, **options)
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(240)
        assert not query.isActive, "the query did not end within 240s"
    finally:
        query.stop()


def _seqs(batches: list[Batch]) -> list[int]:
    return [seq for _, rows in batches for seq, _ in rows]


def test_a_restarted_query_reads_exactly_the_new_events(
    spark: Any, server: NatsServer, tmp_path: Path
) -> None:
    app = App("evstreamrestart", server.url, events=True)
    first = asyncio.run(store_events(app, _events(0, 150)))
    batches: list[Batch] = []
    _run(spark, app, tmp_path / "checkpoint", batches, partitions=3)
    assert sorted(_seqs(batches)) == first

    later = asyncio.run(store_events(app, _events(150, 60)))
    again: list[Batch] = []
    _run(spark, app, tmp_path / "checkpoint", again, partitions=3)
    assert sorted(_seqs(again)) == later
    assert {job for _, rows in again for _, job in rows} == {f"job{i}" for i in range(50, 70)}
    assert min(batch_id for batch_id, _ in again) > max(batch_id for batch_id, _ in batches)


def test_max_events_per_trigger_bounds_every_batch(spark: Any, server: NatsServer, tmp_path: Path) -> None:
    app = App("evstreamlimit", server.url, events=True)
    bodies = _events(0, 200)
    bodies.insert(100, b"not an event")
    seqs = asyncio.run(store_events(app, bodies))
    events = [s for s, b in zip(seqs, bodies, strict=True) if isinstance(b, JobEvent)]
    batches: list[Batch] = []
    _run(spark, app, tmp_path / "checkpoint", batches, maxEventsPerTrigger=40)
    sizes = [len(rows) for _, rows in batches]
    assert max(sizes) <= 40 and len(sizes) >= 5, sizes
    assert sorted(_seqs(batches)) == events


def test_a_query_killed_mid_stream_resumes_without_loss_or_repeat(
    spark: Any, server: NatsServer, tmp_path: Path
) -> None:
    app = App("evstreamkill", server.url, events=True)
    seqs = asyncio.run(store_events(app, _events(0, 120)))
    before: list[Batch] = []
    with pytest.raises(Exception, match="killed in batch 1"):
        _run(spark, app, tmp_path / "checkpoint", before, kill_at=1, maxEventsPerTrigger=30)
    assert [batch_id for batch_id, _ in before] == [0, 1]

    after: list[Batch] = []
    _run(spark, app, tmp_path / "checkpoint", after, maxEventsPerTrigger=30)
    # Batch 1 was planned before the kill: the restart reads that same range again first.
    assert after[0] == before[1]
    read = _seqs(before[:1]) + _seqs(after)
    assert sorted(read) == seqs and len(set(read)) == len(read)


def test_bad_options_are_named(spark: Any, server: NatsServer, tmp_path: Path) -> None:
    app = App("evstreamopts", server.url, events=True)
    asyncio.run(store_events(app, _events(0, 3)))
    for options, message in (({"maxEventsPerTrigger": 0}, "maxEventsPerTrigger"), ({"until": "1d"}, "until")):
        with pytest.raises(Exception, match=message):
            _run(spark, app, tmp_path / f"checkpoint-{message}", [], **options)


def _reader(app: App, **options: str) -> JobEventsStreamReader:
    source = JobEventsDataSource({"app": app.name, "servers": app.servers[0], **options})
    return source.streamReader(StructType())  # the schema is fixed: this one is not looked at


async def _purge_below(app: App, seq: int) -> None:
    nc = await nats.connect(app.servers[0])
    try:
        await nc.jetstream().purge_stream(app.namespace.events_stream, seq=seq)
    finally:
        await nc.close()


def test_offsets_since_and_events_expired_unread(server: NatsServer) -> None:
    """Offsets as the reader plans them, without Spark: the start, ``since``, the limit counted
    from the first sequence kept, a gap left by expired events, a stream made again."""
    app = App("evstreamgap", server.url, events=True)
    seqs = asyncio.run(store_events(app, _events(0, 20)))
    reader = _reader(app, partitions="2")
    assert reader.initialOffset() == {"seq": 0}
    since = datetime.fromtimestamp(moment_after(app, seqs[-1]), UTC).isoformat()
    later = asyncio.run(store_events(app, _events(20, 5)))
    assert _reader(app, since=since).initialOffset() == {"seq": later[0] - 1}
    assert _reader(app, since="2999-01-01").initialOffset() == {"seq": later[-1]}

    # Sequences 1..10 expire before a query that read up to 3 plans its next batch.
    asyncio.run(_purge_below(app, 11))
    assert reader.latestOffset({"seq": 3}, ReadMaxRows(4)) == {"seq": 14}
    assert reader.latestOffset({"seq": 3}, ReadAllAvailable()) == {"seq": 25}
    assert reader.reportLatestOffset() == {"seq": 25}
    with structlog.testing.capture_logs() as logged:
        ranges = reader.partitions({"seq": 3}, {"seq": 14})
    assert [(r.lo, r.hi) for r in ranges] == [(11, 12), (13, 14)]
    assert logged == [
        {
            "event": "spark.events_expired_unread",
            "log_level": "warning",
            "app": app.name,
            "from_seq": 4,
            "to_seq": 10,
            "lost": 7,
        }
    ]
    assert reader.partitions({"seq": 14}, {"seq": 14}) == []

    with pytest.raises(HistoryError, match="made again"):
        reader.latestOffset({"seq": 100}, ReadAllAvailable())
