"""Spark writer throughput: rows/s of ``enqueue_dataframe`` next to raw nats-py ``publish_async``
(1000 acknowledgements in flight), against the same nats-server in the same run.

    python bench/spark_writer.py [--rows 1000000] [--partitions 8] [--master local[2]]

Both sides publish the same jobs: three columns as JSON keyword arguments, a unique
``Nats-Msg-Id`` each, into a WorkQueue stream with dedup. The writer also reads the rows out
of Spark and hashes each key into its job id; the raw side only builds and sends messages.
A 20,000-row write runs first so JVM and Python workers are warm. Prints a table and one
JSON line per figure; the target is a writer/raw ratio of at least 0.8.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

import nats
from nats.js.api import RetentionPolicy, StorageType, StreamConfig

from jsworker import App, Task
from jsworker._server import NatsServer

TARGET = 0.8


async def raw_publish(url: str, rows: int, in_flight: int = 1000) -> float:
    """Rows/s of nats-py ``publish_async`` with ``in_flight`` acknowledgements outstanding."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream(publish_async_max_pending=in_flight)
        await js.add_stream(
            StreamConfig(
                name="RAW",
                subjects=["raw.>"],
                retention=RetentionPolicy.WORK_QUEUE,
                storage=StorageType.FILE,
                duplicate_window=120,
            )
        )
        started = time.perf_counter()
        for i in range(rows):
            body = json.dumps(
                {
                    "args": [],
                    "kwargs": {"order_id": i, "amount": f"{i * 7 % 1000}.00", "customer": f"c{i % 97}"},
                },
                separators=(",", ":"),
            ).encode()
            headers = {
                "Nats-Msg-Id": f"raw-{i}",
                "Jsw-Task": "charge",
                "Jsw-Enqueued-At": str(time.time_ns()),
                "Content-Type": "application/json",
            }
            await js.publish_async("raw.q.default.charge", body, headers=headers)
        await js.publish_async_completed()
        elapsed = time.perf_counter() - started
        stored = (await js.stream_info("RAW")).state.messages
        if stored != rows:
            raise SystemExit(f"raw: the stream holds {stored} messages, not {rows}")
        await js.delete_stream("RAW")  # frees the server's memory before the Spark runs
        return rows / elapsed
    finally:
        await nc.close()


async def stored(url: str, stream: str) -> int:
    nc = await nats.connect(url)
    try:
        return int((await nc.jetstream().stream_info(stream)).state.messages)
    finally:
        await nc.close()


def spark_session(master: str) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master(master)
        .appName("jsworker-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def charge_task(url: str, app_name: str) -> Task[..., None]:
    app = App(app_name, url)

    @app.task
    def charge(order_id: int, amount: str, customer: str) -> None: ...

    return charge


def orders(spark: Any, rows: int, partitions: int) -> Any:
    return spark.range(0, rows, numPartitions=partitions).selectExpr(
        "id AS order_id",
        "CAST(id * 7 % 1000 AS DECIMAL(10, 2)) AS amount",
        "concat('c', id % 97) AS customer",
    )


def main() -> None:
    from jsworker.spark import enqueue_dataframe

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--window", type=int, default=500, help="writer: acknowledgements in flight")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    with NatsServer() as server:
        url = server.url
        spark = spark_session(args.master)
        try:
            enqueue_dataframe(orders(spark, 20_000, 2), charge_task(url, "benchwarm"), key="order_id")
            charge = charge_task(url, "benchspark")

            raw = asyncio.run(raw_publish(url, args.rows))
            df = orders(spark, args.rows, args.partitions)
            first = enqueue_dataframe(df, charge, key="order_id", window=args.window)
            again = enqueue_dataframe(df, charge, key="order_id", window=args.window)
            held = asyncio.run(stored(url, "JSW_BENCHSPARK"))
        finally:
            spark.stop()

    if (first.created, again.duplicates, held) != (args.rows, args.rows, args.rows):
        raise SystemExit(f"wrong counts: {first}; {again}; stream holds {held}")
    figures = [
        ("raw nats-py publish_async(1000)", raw, None),
        ("spark writer, new jobs", first.rows / first.elapsed, first.rows / first.elapsed / raw),
        ("spark writer, all duplicates", again.rows / again.elapsed, again.rows / again.elapsed / raw),
    ]
    print(f"{'figure':<34} {'rows/s':>10} {'vs raw':>8}")
    for label, rate, ratio in figures:
        print(f"{label:<34} {rate:>10.0f} {'' if ratio is None else f'{ratio:.2f}':>8}")
    for label, rate, ratio in figures:
        line = {
            "figure": label,
            "rows": args.rows,
            "partitions": args.partitions,
            "master": args.master,
            "per_s": round(rate),
            "ratio_vs_raw": None if ratio is None else round(ratio, 3),
            "target": None if ratio is None else TARGET,
        }
        print(json.dumps(line))


if __name__ == "__main__":
    main()
