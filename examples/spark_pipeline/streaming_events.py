"""Streaming both ways: orders arriving as files -> the jsworker sink -> workers -> job events
-> per-task throughput and failure rate over 1-minute windows, live.

    python examples/spark_pipeline/streaming_events.py [--jobs 200] [--waves 3]

Starts nats-server with JetStream on a free loopback port and a ``jsworker run
streaming_events`` worker running the two tasks below. Two Structured Streaming queries read
the orders as they land in a folder (one JSON-lines file a wave) and write each as a job of
``charge`` and of ``ship`` (``writeStream.format("jsworker")``: one job per row, once, keyed
by the order id). A third reads ``spark.readStream.format("jsworker-events")``: succeeded and
failed runs per task and 1-minute window (of the events' own time, with a 2-minute watermark
bounding the state), printed as each micro-batch updates them. After each of
the ``--waves``, once the worker has settled its jobs and their events are stored, the query
catches up; after the last everything stops. ``charge`` declines one order in four (rejected,
no retry); ``ship`` fails its first attempt for one order in ten (retried, then succeeds).
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

from run import spark_session  # noqa: E402

from jsworker import App, Reject, current_job  # noqa: E402
from jsworker.testing import NatsServer  # noqa: E402

# Servers come from JSWORKER_URL in the worker; main() sets them for itself. Short backoffs:
# a demonstration's retries should not keep it waiting.
app = App("streaming", events=True, spark_sinks=True, retry_backoff=0.05, retry_backoff_max=0.2)


@app.task
async def charge(order_id: int) -> None:
    """Charge an order: one card in four is declined."""
    if order_id % 4 == 0:
        raise Reject(f"order {order_id}: card declined")


@app.task
async def ship(order_id: int) -> None:
    """Book a shipment: the carrier times out on the first try for one order in ten."""
    if order_id % 10 == 0 and current_job().attempt == 1:
        raise ConnectionError("carrier API timed out")


def expected_events(orders: range) -> int:
    """Events a wave of ``orders`` makes: each job is enqueued, started and settled; a declined
    charge is also dead-lettered; a timed-out shipment fails, is retried and runs again."""
    declined = sum(1 for i in orders if i % 4 == 0)
    timed_out = sum(1 for i in orders if i % 10 == 0)
    return (3 * len(orders) + declined) + (3 * len(orders) + 3 * timed_out)


def land(folder: Path, wave: int, orders: range) -> None:
    """One wave of orders lands in ``folder`` as a JSON-lines file, written whole at once."""
    temporary = folder / f".wave-{wave}.tmp"
    temporary.write_text("".join(f'{{"order_id": {i}}}\n' for i in orders))
    temporary.rename(folder / f"wave-{wave}.json")


async def wait_wave(orders: range, events_before: int, timeout: float) -> int:
    """Wait until the events stream holds every event the wave's jobs make (events are not
    acknowledged: their count is how to know); its size."""
    want = events_before + expected_events(orders)
    deadline = time.monotonic() + timeout
    try:
        conn = await app.producer.connection()
        while (stored := (await conn.js.stream_info(app.namespace.events_stream)).state.messages) < want:
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"{stored - events_before} of {want - events_before} events within {timeout:.0f}s"
                )
            await asyncio.sleep(0.1)
    finally:
        await app.aclose()
    return int(stored)


def per_task_minutes(spark: Any, url: str) -> Any:
    """Runs, successes (the throughput, per minute), failures and failure rate, per task and
    1-minute window of the events' time."""
    from pyspark.sql import functions as F

    events = (
        spark.readStream.format("jsworker-events")
        .option("app", app.name)
        .option("servers", url)
        .option("maxEventsPerTrigger", 5000)
        .load()
    )
    runs = events.where(F.col("event").isin("succeeded", "failed")).withWatermark("ts", "2 minutes")
    counts = runs.groupBy(F.window("ts", "1 minute").alias("window"), "task").agg(
        F.count("*").alias("runs"),
        F.count_if(F.col("event") == "succeeded").alias("ok_per_min"),
        F.count_if(F.col("event") == "failed").alias("failed"),
    )
    return counts.select(
        F.col("window.start").alias("minute"),
        "task",
        "runs",
        "ok_per_min",
        "failed",
        F.round(100 * F.col("failed") / F.col("runs"), 1).alias("fail_pct"),
    )


def start_worker(url: str, log: Path) -> subprocess.Popen[bytes]:
    """``jsworker run streaming_events``, logging to ``log`` (failures are the point here: the
    windows tell of them, not the logs)."""
    env = dict(os.environ, JSWORKER_URL=url)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "jsworker", "run", "streaming_events", "--concurrency", "50"]
    with open(log, "ab") as out:
        return subprocess.Popen(command, cwd=HERE, env=env, stdout=out, stderr=subprocess.STDOUT)


def stop_worker(worker: subprocess.Popen[bytes]) -> int:
    """SIGTERM the worker this script started and wait for it; its exit code."""
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
    try:
        return worker.wait(30)
    except subprocess.TimeoutExpired:
        worker.kill()
        return worker.wait()


async def provision() -> None:
    """The app's streams, the events stream among them (a query needs it to start), and its
    queue's consumer (jobs wait there for the worker)."""
    try:
        await app.provision()
    finally:
        await app.aclose()


def sink(spark: Any, url: str, folder: Path, task: str, checkpoint: Path) -> Any:
    """A query writing each order that lands in ``folder`` as one job of ``task``."""
    orders = spark.readStream.schema("order_id long").json(str(folder))
    return (
        orders.writeStream.format("jsworker")
        .option("app", app.name)
        .option("task", task)
        .option("key", "order_id")
        .option("servers", url)
        .option("events", "true")  # the app emits job events: "enqueued" comes from the writer
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="0.5 seconds")
        .start()
    )


def show(batch: Any, batch_id: int) -> None:
    """Print the windows a micro-batch updated, with their figures so far."""
    print(f"-------------------------------------------\nBatch: {batch_id}", flush=True)
    batch.orderBy("minute", "task").show(50, truncate=False)


def stream(spark: Any, url: str, tmp: Path, jobs: int, waves: int) -> None:
    """Run the waves with the queries writing jobs and watching events; check every event was read."""
    import jsworker.spark

    jsworker.spark.register(spark)  # the jsworker sink and the jsworker-events source
    asyncio.run(provision())
    folder = tmp / "orders"
    folder.mkdir()
    sinks = [sink(spark, url, folder, task, tmp / f"sink-{task}") for task in ("charge", "ship")]
    # No extra micro-batch only to move the watermark on: each table shown has new figures.
    no_data = "spark.sql.streaming.noDataMicroBatches.enabled"
    before = spark.conf.get(no_data)
    spark.conf.set(no_data, "false")
    query = (
        per_task_minutes(spark, url)
        .writeStream.outputMode("update")
        .foreachBatch(show)
        .option("checkpointLocation", str(tmp / "checkpoint"))
        .trigger(processingTime="1 second")
        .start()
    )
    spark.conf.set(no_data, before)  # read when the query started: the session is left as it was
    stored = 0
    try:
        for wave in range(1, waves + 1):
            orders = range((wave - 1) * jobs, wave * jobs)
            land(folder, wave, orders)
            stored = asyncio.run(wait_wave(orders, stored, timeout=60))
            print(
                f"wave {wave}: {jobs} charges and {jobs} shipments settled, {stored} events stored",
                flush=True,
            )
            query.processAllAvailable()
        read = sum(p["numInputRows"] for p in query.recentProgress)
        offset = query.lastProgress["sources"][0]["endOffset"]
    finally:
        for running in (query, *sinks):
            running.stop()
    print(f"the query read {read} events, up to offset {offset} (stream sequences)")
    if read != stored:
        raise SystemExit(f"the query read {read} events, the stream holds {stored}")


def run(spark: Any, url: str, tmp: Path, jobs: int, waves: int) -> int:
    """A worker for the app on the server at ``url``, the waves streamed through it, the worker
    stopped; its exit code."""
    app.servers = [url]
    worker = start_worker(url, tmp / "worker.log")
    try:
        stream(spark, url, tmp, jobs, waves)
    finally:
        code = stop_worker(worker)
    print(f"worker stopped (exit code {code})")
    return code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200, help="orders a wave (default 200)")
    parser.add_argument("--waves", type=int, default=3, help="waves of orders (default 3)")
    args = parser.parse_args()

    spark = spark_session()
    try:
        with NatsServer() as server, tempfile.TemporaryDirectory(prefix="jsworker-streaming-") as tmp:
            print(f"nats-server with JetStream at {server.url}", flush=True)
            code = run(spark, server.url, Path(tmp), args.jobs, args.waves)
    finally:
        spark.stop()
    if code != 0:
        raise SystemExit(code)


if __name__ == "__main__":
    main()
