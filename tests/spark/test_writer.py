"""The ``jsworker`` Spark writer and ``enqueue_dataframe`` against a real nats-server.

50,000 rows become exactly 50,000 jobs, once: a second write, a partition retried by Spark
and a write of the same rows all leave the stream as it was, and a new run id enqueues the
rows again. A worker runs what the writer stored. Bad rows fail the write by column name.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nats
import nats.js.errors
import pytest
from pyspark import TaskContext, cloudpickle

from jsworker import App, ConfigurationError
from jsworker._runtime.settings import WorkerSettings
from jsworker._runtime.worker import Worker
from jsworker.spark import UnsupportedColumnError, enqueue_dataframe, job_id, register
from jsworker.spark._publish import PartitionResult, write_partition
from jsworker.spark._writer import JobsDataSource, JobsWriter
from jsworker.testing import NatsServer

from ..support import stream_messages, wait_until, wait_until_async

pytestmark = pytest.mark.timeout(300)

ROWS = 50_000


@pytest.fixture(scope="module")
def session(spark: Any) -> Any:
    """The shared SparkSession with jsworker's data sources registered."""
    register(spark)
    return spark


def _orders(spark: Any, rows: int = ROWS, partitions: int = 4) -> Any:
    return spark.range(0, rows, numPartitions=partitions).selectExpr(
        "id AS order_id",
        "CAST(id * 7 % 1000 AS DECIMAL(10, 2)) AS amount",
        "concat('c', id % 97) AS customer",
    )


def _charge(url: str) -> Any:
    app = App("sparkshop", url)

    @app.task(queue="billing")
    def charge(order_id: int, amount: str, customer: str) -> None: ...

    return charge


def test_rows_become_jobs_exactly_once(session: Any, nats_server_module: NatsServer) -> None:
    """50,000 rows: 50,000 created; written again: 0 created, 50,000 duplicates; a new run id:
    50,000 more. The stream holds what the reports say."""
    url = nats_server_module.url
    charge = _charge(url)
    orders = _orders(session)

    first = enqueue_dataframe(orders, charge, key="order_id")
    assert (first.rows, first.created, first.duplicates) == (ROWS, ROWS, 0)
    assert stream_messages(url, "JSW_SPARKSHOP") == ROWS

    again = enqueue_dataframe(orders, charge, key="order_id")
    assert (again.rows, again.created, again.duplicates) == (ROWS, 0, ROWS)
    assert f"{ROWS} rows, 0 created, {ROWS} duplicates" in str(again)
    assert stream_messages(url, "JSW_SPARKSHOP") == ROWS

    rerun = enqueue_dataframe(orders, charge, key="order_id", run_id="2024-06-01")
    assert (rerun.rows, rerun.created, rerun.duplicates) == (ROWS, ROWS, 0)
    assert stream_messages(url, "JSW_SPARKSHOP") == 2 * ROWS


class _FailOnceWriter(JobsWriter):
    """Partition 1's first attempt stores its first 5,000 jobs (all acknowledged), then fails."""

    def write(self, iterator: Iterator[Any]) -> PartitionResult:
        context = TaskContext.get()
        if context is not None and context.partitionId() == 1 and context.attemptNumber() == 0:
            asyncio.run(write_partition(_first_rows(iterator, 5000), self.settings, self.schema, 1))
            raise RuntimeError("partition 1 fails its first attempt after 5000 stored jobs")
        return super().write(iterator)


class _FailOnceSource(JobsDataSource):
    @classmethod
    def name(cls) -> str:
        return "jsworker-fail-once"

    def writer(self, schema: Any, overwrite: bool) -> JobsWriter:
        plain = super().writer(schema, overwrite)
        return _FailOnceWriter(plain.settings, plain.schema)


def _first_rows(batches: Iterator[Any], rows: int) -> Iterator[Any]:
    for batch in batches:
        if rows <= 0:
            return
        yield batch.slice(0, rows)
        rows -= batch.num_rows


def test_a_partition_retried_by_spark_stores_nothing_twice(
    session: Any, nats_server_module: NatsServer, tmp_path: Path
) -> None:
    """Partition 1 fails its first attempt after 5,000 of its jobs were stored; Spark runs it
    again, the server drops those 5,000 as duplicates, and the stream holds 50,000."""
    # The executors' Python workers cannot import this test module: ship its classes by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
    session.dataSource.register(_FailOnceSource)
    url = nats_server_module.url
    report = tmp_path / "report.json"
    (
        _orders(session)
        .write.format("jsworker-fail-once")
        .mode("append")
        .option("app", "sparkretry")
        .option("task", "charge")
        .option("key", "order_id")
        .option("servers", url)
        .option("report_path", str(report))
        .save()
    )
    totals = json.loads(report.read_text())
    assert totals == {"partitions": 4, "rows": ROWS, "created": ROWS - 5000, "duplicates": 5000}
    assert stream_messages(url, "JSW_SPARKRETRY") == ROWS


def test_a_worker_runs_the_jobs_with_their_arguments(session: Any, nats_server_module: NatsServer) -> None:
    """Jobs written by the data source carry a producer's headers and run in a worker: keyword
    arguments from all columns (decimals and dates as strings), positional ones from an array
    column, keyword ones from a struct column."""
    url = nats_server_module.url
    app = App("sparkrun", url)
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    @app.task
    def ship(order_id: int, amount: str, day: str, lines: list[int] | None) -> None:
        calls.append(("ship", (), {"order_id": order_id, "amount": amount, "day": day, "lines": lines}))

    @app.task
    def add(a: int, b: int) -> None:
        calls.append(("add", (a, b), {}))

    @app.task
    def notify(to: str, when: str) -> None:
        calls.append(("notify", (), {"to": to, "when": when}))

    small = session.sql(
        "SELECT id AS order_id, CAST(id + 0.5 AS DECIMAL(6, 2)) AS amount, "
        "date_add(DATE'2024-05-01', CAST(id AS INT)) AS day, "
        "IF(id = 0, NULL, array(id, id * 2)) AS lines, array(id, 10) AS pair, "
        "named_struct('to', concat('u', id), 'when', TIMESTAMP'2024-05-01 12:00:00') AS message "
        "FROM range(3)"
    )

    def write(df: Any, task: str, **options: str) -> None:
        out = df.write.format("jsworker").mode("append").option("app", "sparkrun").option("task", task)
        out.option("servers", url).option("key", "order_id").options(**options).save()

    write(small.drop("pair", "message"), "ship")
    write(small, "add", args_column="pair")
    write(small, "notify", args_column="message", queue="default")

    async def first_message() -> Any:
        nc = await nats.connect(url)
        try:
            return await nc.jetstream().get_msg("JSW_SPARKRUN", 1)
        finally:
            await nc.close()

    stored = asyncio.run(first_message())
    ident = job_id("sparkrun", "ship", [_order_of(stored)])
    assert stored.headers["Nats-Msg-Id"] == ident
    assert stored.subject == f"jsw.sparkrun.q.default.ship.{ident}"  # found by its id, as any job
    assert stored.headers["Jsw-Task"] == "ship"
    assert stored.headers["Content-Type"] == "application/json"
    assert abs(int(stored.headers["Jsw-Enqueued-At"]) / 1e9 - time.time()) < 300

    asyncio.run(_work_until(app, lambda: len(calls) == 9, timeout=30))
    assert sorted(calls, key=repr) == sorted(
        [
            *(
                (
                    "ship",
                    (),
                    {
                        "order_id": i,
                        "amount": f"{i}.50",
                        "day": f"2024-05-0{i + 1}",
                        "lines": None if i == 0 else [i, 2 * i],
                    },
                )
                for i in range(3)
            ),
            *(("add", (i, 10), {}) for i in range(3)),
            *(("notify", (), {"to": f"u{i}", "when": "2024-05-01T12:00:00+00:00"}) for i in range(3)),
        ],
        key=repr,
    )


def _order_of(msg: Any) -> int:
    """The order id in a stored job's body."""
    return int(json.loads(msg.data)["kwargs"]["order_id"])


async def _work_until(app: App, done: Callable[[], bool], timeout: float) -> None:
    worker = Worker(app, WorkerSettings(concurrency=10, grace=1))
    running = asyncio.create_task(worker.run())
    try:
        await wait_until_async(done, timeout=timeout, message="the worker to run the jobs")
    finally:
        worker.stop()
        await running
        await app.aclose()


def _take(url: str, app_name: str) -> Any:
    app = App(app_name, url)

    @app.task
    def take(order_id: int, payload: Any) -> None: ...

    return take


def test_an_unsupported_column_fails_before_anything_is_sent(
    session: Any, nats_server_module: NatsServer
) -> None:
    """A binary column is refused by name on the driver, and by the data source's planning when
    written directly: no partition runs, no stream is even created."""
    url = nats_server_module.url
    take = _take(url, "sparkbad")
    df = session.sql("SELECT id AS order_id, CAST('x' AS BINARY) AS payload FROM range(10)")
    with pytest.raises(UnsupportedColumnError, match="column 'payload' has type binary"):
        enqueue_dataframe(df, take, key="order_id")
    with pytest.raises(Exception, match="column 'payload' has type binary") as raised:
        (
            df.write.format("jsworker")
            .mode("append")
            .option("app", "sparkbad")
            .option("task", "take")
            .option("key", "order_id")
            .option("servers", url)
            .save()
        )
    assert "UnsupportedColumnError" in str(raised.value)
    with pytest.raises(ConfigurationError, match="unexpected keyword argument 'extra'"):
        enqueue_dataframe(df.selectExpr("order_id", "'p' AS payload", "1 AS extra"), take, key="order_id")
    assert not _stream_exists(url, "JSW_SPARKBAD")


def test_a_null_key_fails_the_write_naming_the_column_and_row(
    session: Any, nats_server_module: NatsServer
) -> None:
    """Row 6 of the only partition has no order id: the write raises naming the key column and
    the row; no report says it succeeded."""
    url = nats_server_module.url
    take = _take(url, "sparknull")
    df = session.sql(
        "SELECT IF(id = 6, NULL, id) AS order_id, concat('p', id) AS payload FROM range(0, 10, 1, 1)"
    )
    with pytest.raises(Exception, match="key column 'order_id' is null in row 6 of partition 0"):
        enqueue_dataframe(df, take, key="order_id")
    nan = session.sql(
        "SELECT id AS order_id, IF(id = 3, double('NaN'), 1.0) AS payload FROM range(0, 5, 1, 1)"
    )
    with pytest.raises(Exception, match="column 'payload' in row 3 of partition 0 cannot be sent as JSON"):
        enqueue_dataframe(nan, take, key="order_id")


def _stream_exists(url: str, stream: str) -> bool:
    async def exists() -> bool:
        nc = await nats.connect(url)
        try:
            await nc.jetstream().stream_info(stream)
        except nats.js.errors.NotFoundError:
            return False
        finally:
            await nc.close()
        return True

    return asyncio.run(exists())


def test_enqueued_events_are_emitted_for_new_jobs_only(session: Any, nats_server_module: NatsServer) -> None:
    """An app with events=True gets one ``enqueued`` event per job created, as from its own
    producers; duplicates of a second write emit none."""
    url = nats_server_module.url
    app = App("sparkevents", url, events=True)

    @app.task
    def charge(order_id: int, amount: str, customer: str) -> None: ...

    orders = _orders(session, rows=200, partitions=2)
    assert enqueue_dataframe(orders, charge, key="order_id").created == 200
    assert enqueue_dataframe(orders, charge, key="order_id").duplicates == 200
    # Events are sent without waiting for the server's acknowledgement: the last may still be
    # on their way when the write returns.
    stored = wait_until(
        lambda: stream_messages(url, "JSW_SPARKEVENTS_EVENTS"),
        until=lambda n: n >= 200,
        timeout=10,
        message="200 enqueued events",
    )
    assert stored == 200


def test_overwrite_and_missing_options_are_refused(session: Any, nats_server_module: NatsServer) -> None:
    """A queue cannot be overwritten, and a write without a key says which option is missing."""
    df = session.range(3).withColumnRenamed("id", "order_id")

    def write(mode: str, **options: str) -> None:
        out = df.write.format("jsworker").mode(mode).option("servers", nats_server_module.url)
        out.option("app", "sparkmodes").option("task", "take").options(**options).save()

    with pytest.raises(Exception, match="only appends jobs"):
        write("overwrite", key="order_id")
    with pytest.raises(Exception, match="needs the 'key' option"):
        write("append")
    assert not _stream_exists(nats_server_module.url, "JSW_SPARKMODES")
