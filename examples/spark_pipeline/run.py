"""Spark data pipeline, end to end: DataFrame -> jobs -> workers -> job events -> Parquet ->
per-task report.

    python examples/spark_pipeline/run.py [--rows 100000] [--workers 2] [--out DIR]

Starts nats-server with JetStream on a free loopback port, enqueues one ``score_order`` job
per row of a Spark DataFrame (``enqueue_dataframe``), runs ``jsworker run tasks`` worker
processes until the queue is empty, exports the job events to Parquet (what
``jsworker events export`` does), then reads the files back with Spark and prints
``job_report``. About one row in nine is flaky (fails once, succeeds on its retry) and one
in nine is bad (rejected: a dead letter); the run checks the report against that mix.
Needs ``pip install 'jsworker[spark]'`` and Java 17+.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import nats.js.errors  # noqa: E402
import tasks  # noqa: E402

from jsworker.events import export_events  # noqa: E402
from jsworker.testing import NatsServer  # noqa: E402


def spark_session() -> Any:
    """A local Spark session using this interpreter for its Python workers."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("jsworker-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def orders(spark: Any, rows: int) -> Any:
    """``rows`` orders; ``flaky`` and ``bad`` follow the order id, so the mix is known."""
    from pyspark.sql import functions as F

    order_id = F.col("id")
    return spark.range(rows).select(
        order_id.alias("order_id"),
        (order_id * 37 % 10_000 + 100).alias("cents"),
        (order_id % 9).isin(1, 5).alias("flaky"),
        (order_id % 9 == 8).alias("bad"),
    )


def start_workers(url: str, count: int, concurrency: int, log: Path) -> list[subprocess.Popen[bytes]]:
    """``count`` worker processes running the tasks of this directory, logging to ``log``
    (retries and dead letters are the point here: the report tells of them, not the logs)."""
    env = dict(os.environ, JSWORKER_URL=url)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "jsworker", "run", "tasks", "--concurrency", str(concurrency)]
    with open(log, "ab") as out:
        return [
            subprocess.Popen(command, cwd=HERE, env=env, stdout=out, stderr=subprocess.STDOUT)
            for _ in range(count)
        ]


def stop_workers(workers: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each worker this script started and wait: stopping flushes their last events."""
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
    for worker in workers:
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


async def _queue_empty() -> bool:
    app = tasks.app
    conn = await app.producer.connection()
    try:
        info = await conn.js.consumer_info(app.namespace.stream, tasks.score_order.queue)
    except nats.js.errors.NotFoundError:
        return False  # no worker has come up to make the queue's consumer yet
    return not info.num_pending and not info.num_ack_pending


def wait_until_done(timeout: float) -> None:
    """Block until every job was settled (done or dead-lettered)."""

    async def wait() -> None:
        deadline = time.monotonic() + timeout
        try:
            while not await _queue_empty():
                if time.monotonic() > deadline:
                    raise SystemExit(f"jobs not done within {timeout:.0f}s")
                await asyncio.sleep(0.2)
        finally:
            await tasks.app.aclose()

    asyncio.run(wait())


def pipeline(
    spark: Any, df: Any, url: str, out: Path, log: Path, workers: int = 2, concurrency: int = 200
) -> list[Any]:
    """Enqueue ``df`` as jobs, work them off, export the events to ``out``; the report rows."""
    from jsworker.spark import enqueue_dataframe
    from jsworker.spark.analytics import job_report

    tasks.app.servers = [url]
    began = time.time()
    procs = start_workers(url, workers, concurrency, log)
    try:
        enqueued = enqueue_dataframe(df, tasks.score_order, key="order_id")
        print(f"enqueued: {enqueued}")
        wait_until_done(timeout=60 + enqueued.rows / 500)
        print(f"all jobs settled after {time.time() - began:.1f}s")
    finally:
        stop_workers(procs)
    exported = export_events(tasks.app, out, since=began - 5)
    print(
        f"exported {exported.events} events to {len(exported.files)} file(s) in {out} "
        f"in {exported.seconds:.2f}s ({exported.rate:,.0f} events/s)"
    )
    return job_report(spark.read.parquet(str(out))).collect()  # type: ignore[no-any-return]


def expected(rows: int) -> dict[str, int]:
    """What the report must say for ``orders(spark, rows)``."""
    flaky = sum(1 for i in range(rows) if i % 9 in (1, 5))
    bad = sum(1 for i in range(rows) if i % 9 == 8)
    return {
        "jobs": rows,
        "runs": rows + flaky,
        "succeeded": rows - bad,
        "failed": flaky + bad,
        "retried": flaky,
        "dead_lettered": bad,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000, help="orders to enqueue (default 100000)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument(
        "--out", type=Path, default=None, help="directory for the Parquet files (default: temporary)"
    )
    args = parser.parse_args()

    from jsworker.spark.analytics import print_report

    spark = spark_session()
    try:
        with NatsServer() as server, tempfile.TemporaryDirectory(prefix="jsworker-events-") as tmp:
            print(f"nats-server with JetStream at {server.url}")
            out = args.out or Path(tmp) / "events"
            log = Path(tmp) / "workers.log"
            report = pipeline(spark, orders(spark, args.rows), server.url, out, log, workers=args.workers)
            print()
            print_report(report)
    finally:
        spark.stop()
    want = expected(args.rows)
    got = {key: sum(row[key] for row in report) for key in want}
    if got != want:
        raise SystemExit(f"the report does not match the mix: expected {want}, got {got}")
    print(f"\nthe report matches the mix: {want}")


if __name__ == "__main__":
    main()
