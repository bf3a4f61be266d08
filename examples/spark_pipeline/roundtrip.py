"""Spark round trip: a DataFrame -> one job per row -> workers -> each row's result joined
back -> Parquet.

    python examples/spark_pipeline/roundtrip.py [--rows 20000] [--workers 2] [--out DIR]

Starts nats-server with JetStream on a free loopback port and ``jsworker run tasks`` worker
processes, runs ``quote`` on every order with ``jsworker.spark.map_dataframe`` (its result
parsed to columns), writes the rows with their results to Parquet and reads them back. About
one row in nine fails once and succeeds on its retry; one in nine is rejected and comes back
``failed`` with its error. Running it again on the same rows within the duplicate window makes
no new job. Needs ``pip install 'jsworker[spark]'`` and Java 17+.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import tasks  # noqa: E402
from run import orders, spark_session, start_workers, stop_workers  # noqa: E402

from jsworker.testing import NatsServer  # noqa: E402


def round_trip(spark: Any, df: Any, url: str, out: Path, log: Path, workers: int = 2) -> dict[str, int]:
    """Run ``quote`` on every row of ``df``, write rows and results to ``out``; the rows per state."""
    from pyspark.sql import functions as F

    from jsworker.spark import map_dataframe

    tasks.app.servers = [url]
    procs = start_workers(url, workers, 200, log)
    try:
        began = time.perf_counter()
        priced = map_dataframe(
            df, tasks.quote, key="order_id", timeout=300, result_schema="cents long, tax long"
        )
        priced.write.mode("overwrite").parquet(str(out))
        print(f"{df.count()} rows priced and written to {out} in {time.perf_counter() - began:.1f}s")
    finally:
        stop_workers(procs)
    back = spark.read.parquet(str(out))
    back.where(F.col("state") == "failed").select("order_id", "error").show(3, truncate=False)
    back.where(F.col("state") == "succeeded").select(
        "order_id", "result.cents", "result.tax", "attempts"
    ).show(3)
    return {r.state: r["count"] for r in back.groupBy("state").count().collect()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=20_000, help="orders (default 20000)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--out", type=Path, default=None, help="directory for the Parquet files")
    args = parser.parse_args()

    spark = spark_session()
    try:
        with NatsServer() as server, tempfile.TemporaryDirectory(prefix="jsworker-roundtrip-") as tmp:
            print(f"nats-server with JetStream at {server.url}")
            out = args.out or Path(tmp) / "priced"
            states = round_trip(
                spark, orders(spark, args.rows), server.url, out, Path(tmp) / "workers.log", args.workers
            )
    finally:
        spark.stop()
    bad = sum(1 for i in range(args.rows) if i % 9 == 8)
    want = {"succeeded": args.rows - bad, "failed": bad}
    if states != want:
        raise SystemExit(f"expected {want} rows per state, got {states}")
    print(f"every row came back: {states}")


if __name__ == "__main__":
    main()
