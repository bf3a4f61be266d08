"""examples/spark_pipeline/streaming_events.py runs by itself: a worker, a streaming query of
its job events, per-task figures per minute on the console, every event read, a clean stop."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..support import need

pytestmark = pytest.mark.timeout(240)

EXAMPLE = Path(__file__).parents[2] / "examples" / "spark_pipeline" / "streaming_events.py"

# A console-sink row: minute, task, runs, successes, failures, failure rate.
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


def test_streaming_example_prints_per_task_windows() -> None:
    need(shutil.which("java") is not None, "Spark needs Java 17+ on PATH")
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--jobs", "40", "--waves", "2"],
        capture_output=True,
        text=True,
        timeout=200,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "Batch: 0" in out
    # Two waves of 40 orders: 10 charges declined a wave; 4 shipments failed once, then succeeded.
    assert totals(out) == {"charge": [80, 60, 20], "ship": [88, 80, 8]}, out
    for _, _, runs, _, failed, pct in ROW.findall(out):
        assert float(pct) == round(100 * int(failed) / int(runs), 1)
    # Per wave: 3 events a job, a dead letter per declined charge, 3 more per failed shipment.
    assert "the query read 524 events" in out, out
    assert "worker stopped (exit code 0)" in out
    assert "Traceback" not in result.stderr
