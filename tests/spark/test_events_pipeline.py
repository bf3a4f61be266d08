"""End to end with real workers: DataFrame -> jobs -> ``jsworker run`` -> job events -> Parquet
-> job_report, for a known mix of outcomes (the example's pipeline, on a small DataFrame)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jsworker._server import NatsServer

from .examples import known_mix, load_example

pytestmark = pytest.mark.timeout(240)


def test_known_mix_is_reported_exactly(spark: Any, nats_server: NatsServer, tmp_path: Path) -> None:
    example = load_example("run")
    df = known_mix(spark)
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
