"""Spark both ways: ``map_dataframe`` rows/s end to end next to enqueue alone, and the streaming
sink at a steady input rate with its latency from a row's arrival to its job's start.

    python bench/spark_roundtrip.py [--rows 100000] [--workers 2] [--rate 2000] [--seconds 20]

One nats-server, ``--workers`` ``jsworker run apps.spark_app`` processes (``-c 200``), a local
SparkSession (``local[2]``). Figures, in this order:

* ``enqueue``: ``enqueue_dataframe`` of ``--rows`` rows (the writer alone: jobs stored, not
  run), rows/s;
* ``map_dataframe``: the same rows under another run id through ``map_dataframe`` of a no-op
  task that keeps its result: enqueue, the workers' runs, the wait and the parallel read of
  every result, rows/s from the call to the DataFrame in hand; every row must come back
  ``succeeded`` with its own result;
* ``sink``: a rate source of ``--rate`` rows/s for ``--seconds`` into the ``jsworker`` sink
  (trigger 0.5 s), rows/s stored, and p50/p99 from each row's arrival (the rate source's
  timestamp) to its job's start in a worker. Every row must make one job, once.

Prints a table and one JSON line per figure. A 2,000-row ``map_dataframe`` runs first so the
JVM, the Python workers and the jsworker workers are warm.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import spark_writer
from apps import spark_app
from lib import records
from lib.procs import start_worker
from lib.stats import percentile

from jsworker._server import NatsServer


def rows(spark: Any, n: int) -> Any:
    return spark.range(0, n, numPartitions=4).selectExpr("id AS order_id")


async def provision(url: str) -> None:
    spark_app.app.servers = [url]
    try:
        await spark_app.app.provision()
    finally:
        await spark_app.app.aclose()


def sink_figures(
    spark: Any, url: str, rate: int, seconds: int, tmp: Path, record_file: Path
) -> dict[str, float]:
    """The rate source into the sink for ``seconds``; stored rows/s and arrival -> start."""
    stream = spark.readStream.format("rate").option("rowsPerSecond", rate).load()
    query = (
        stream.writeStream.format("jsworker")
        .option("app", spark_app.app.name)
        .option("task", "stamp")
        .option("queue", "stamped")
        .option("key", "value")
        .option("servers", url)
        .option("checkpointLocation", str(tmp / "sink-checkpoint"))
        .trigger(processingTime="0.5 seconds")
        .start()
    )
    started = time.monotonic()
    try:
        query.awaitTermination(seconds)
    finally:
        query.stop()
    elapsed = time.monotonic() - started
    written = sum(int(p["numInputRows"]) for p in query.recentProgress)
    got = records.wait_for(str(record_file), written, timeout=60)
    runs = records.read(str(record_file))
    if got != written or len({key for key, _, _ in runs}) != written:
        raise SystemExit(f"sink: {written} rows written, {got} runs ({len({r[0] for r in runs})} distinct)")
    latency = [(at - arrived) / 1e6 for _, arrived, at in runs]
    return {
        "rows": written,
        "rows_per_s": written / elapsed,
        "p50_ms": percentile(latency, 50),
        "p99_ms": percentile(latency, 99),
    }


def main() -> None:
    from jsworker.spark import enqueue_dataframe, map_dataframe

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rate", type=int, default=2000, help="sink: rows a second from the rate source")
    parser.add_argument("--seconds", type=int, default=20, help="sink: how long the stream runs")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    with NatsServer() as server, tempfile.TemporaryDirectory(prefix="jsworker-bench-spark-") as scratch:
        url, tmp = server.url, Path(scratch)
        asyncio.run(provision(url))
        stamped = tmp / "stamped.records"
        workers = [
            start_worker(
                url,
                stamped,
                tmp,
                queues="default,stamped",
                concurrency=200,
                module="apps.spark_app",
                name=f"spark-worker-{i}",
            )
            for i in range(args.workers)
        ]
        spark = spark_writer.spark_session(args.master)
        try:
            noop = spark_app.noop
            map_dataframe(rows(spark, 2000), noop, key="order_id", run_id="warm-up", timeout=120).count()
            report = enqueue_dataframe(rows(spark, args.rows), noop, key="order_id", run_id="enqueue-only")
            began = time.perf_counter()
            mapped = map_dataframe(
                rows(spark, args.rows), noop, key="order_id", run_id="round-trip", timeout=600
            )
            states = {r.state: r["count"] for r in mapped.groupBy("state").count().collect()}
            map_elapsed = time.perf_counter() - began
            wrong = mapped.where("state != 'succeeded' OR CAST(result AS BIGINT) != order_id").count()
            if states != {"succeeded": args.rows} or wrong:
                raise SystemExit(f"map_dataframe: {states}, {wrong} wrong results")
            sink = sink_figures(spark, url, args.rate, args.seconds, tmp, stamped)
        finally:
            spark.stop()
            for worker in workers:
                worker.stop()

    figures = [
        ("enqueue", "enqueue_dataframe (stored, not run)", report.rows / report.elapsed, "rows/s"),
        (
            "map_dataframe",
            f"map_dataframe, no-op with results, {args.workers} workers",
            args.rows / map_elapsed,
            "rows/s",
        ),
        ("sink", f"streaming sink, rate source at {args.rate}/s", sink["rows_per_s"], "rows/s"),
        ("sink_p50", "row arrival -> job start, p50", sink["p50_ms"], "ms"),
        ("sink_p99", "row arrival -> job start, p99", sink["p99_ms"], "ms"),
    ]
    print(f"{'figure':<16} {'what':<52} {'value':>10} unit")
    for name, label, value, unit in figures:
        print(f"{name:<16} {label:<52} {value:>10,.1f} {unit}")
    for name, label, value, unit in figures:
        print(json.dumps({"figure": f"spark.{name}", "label": label, "value": round(value, 2), "unit": unit,
                          "rows": args.rows, "workers": args.workers, "master": args.master}))  # fmt: skip


if __name__ == "__main__":
    main()
