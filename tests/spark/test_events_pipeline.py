"""End to end with real workers: DataFrame -> jobs -> ``jsworker run`` -> job events -> Parquet
-> job_report, for a known mix of outcomes (the example's pipeline, on a small DataFrame)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from jsworker._server import NatsServer

pytestmark = pytest.mark.timeout(240)

EXAMPLE = Path(__file__).parents[2] / "examples" / "spark_pipeline" / "run.py"


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("spark_pipeline_run", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_known_mix_is_reported_exactly(spark: Any, nats_server: NatsServer, tmp_path: Path) -> None:
    example = _example()
    # 30 succeed at once, 10 fail once and succeed on their retry, 5 are rejected.
    rows = [(i, 100 + i, 30 <= i < 40, i >= 40) for i in range(45)]
    df = spark.createDataFrame(rows, "order_id long, cents long, flaky boolean, bad boolean")
    out = tmp_path / "events"
    report = example.pipeline(spark, df, nats_server.url, out, tmp_path / "workers.log", workers=1)

    assert len(report) == 1
    row = report[0].asDict()
    counts = {k: row[k] for k in ("task", "jobs", "runs", "succeeded", "failed", "retried", "dead_lettered")}
    assert counts == {
        "task": "score_order",
        "jobs": 45,
        "runs": 55,
        "succeeded": 40,
        "failed": 15,
        "retried": 10,
        "dead_lettered": 5,
    }
    assert row["failure_rate"] == pytest.approx(15 / 55)
    assert row["retry_rate"] == pytest.approx(10 / 45)
    assert row["dead_letter_rate"] == pytest.approx(5 / 45)
    assert row["run_p50"] is not None and row["wait_p99"] is not None

    events = spark.read.parquet(str(out))
    per_kind = {r.event: r["count"] for r in events.groupBy("event").count().collect()}
    assert per_kind == {
        "enqueued": 45,
        "started": 55,
        "succeeded": 40,
        "failed": 15,
        "retried": 10,
        "dead_lettered": 5,
    }
    outcomes = {
        (r.event, r.outcome): r["count"]
        for r in events.where("outcome IS NOT NULL").groupBy("event", "outcome").count().collect()
    }
    assert outcomes == {("failed", "failed"): 10, ("failed", "rejected"): 5, ("dead_lettered", "rejected"): 5}
