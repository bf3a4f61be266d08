"""examples/spark_pipeline/streaming_events.py on the suite's Spark session: a worker, a
streaming query of its job events, per-task figures per minute printed, every event read, a
clean stop."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from jsworker.testing import NatsServer

from .examples import load_example

pytestmark = pytest.mark.timeout(240)

# A printed row: minute, task, runs, successes, failures, failure rate.
ROW = re.compile(
    r"^\|(\d{4}-\d\d-\d\d \d\d:\d\d:00)\|(\w+) *\|(\d+) *\|(\d+) *\|(\d+) *\|([\d.]+) *\|$", re.M
)


def totals(out: str) -> dict[str, list[int]]:
    """Runs, successes and failures per task: each window's last figures (a micro-batch shows
    the windows it updated, with their counts so far), summed over the windows."""
    windows = {(minute, task): (runs, ok, failed) for minute, task, runs, ok, failed, _ in ROW.findall(out)}
    summed: dict[str, list[int]] = {}
    for (_, task), figures in windows.items():
        summed[task] = [a + int(b) for a, b in zip(summed.get(task, [0, 0, 0]), figures, strict=True)]
    return summed


def test_streaming_example_prints_per_task_windows(
    spark: Any, nats_server: NatsServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    example = load_example("streaming_events")
    no_data = "spark.sql.streaming.noDataMicroBatches.enabled"
    before = spark.conf.get(no_data)
    assert example.run(spark, nats_server.url, tmp_path, 40, 2) == 0
    out = capsys.readouterr().out
    assert "Batch: 0" in out
    # Two waves of 40 orders: 10 charges declined a wave; 4 shipments failed once, then succeeded.
    assert totals(out) == {"charge": [80, 60, 20], "ship": [88, 80, 8]}, out
    for _, _, runs, _, failed, pct in ROW.findall(out):
        assert float(pct) == round(100 * int(failed) / int(runs), 1)
    # Per wave: 3 events a job, a dead letter per declined charge, 3 more per failed shipment.
    assert "the query read 524 events" in out, out
    assert "worker stopped (exit code 0)" in out
    assert spark.conf.get(no_data) == before  # the session is left as it was
