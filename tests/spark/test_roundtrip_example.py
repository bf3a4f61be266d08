"""examples/spark_pipeline/roundtrip.py with real workers: every row comes back with its
result (parsed to columns) or its failure, written to Parquet and read back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jsworker.testing import NatsServer

from .examples import known_mix, load_example

pytestmark = pytest.mark.timeout(240)


def test_every_row_comes_back_with_its_result(spark: Any, nats_server: NatsServer, tmp_path: Path) -> None:
    example = load_example("roundtrip")
    df = known_mix(spark)
    out = tmp_path / "priced"
    states = example.round_trip(spark, df, nats_server.url, out, tmp_path / "workers.log", workers=1)
    assert states == {"succeeded": 40, "failed": 5}
    back = {r.order_id: r for r in spark.read.parquet(str(out)).collect()}
    assert sorted(back) == list(range(45))
    assert (back[3].result.cents, back[3].result.tax, back[3].attempts) == (103, 20, 1)
    assert back[35].attempts == 2 and back[35].state == "succeeded"  # failed once, then priced
    assert back[44].state == "failed" and back[44].error == "Reject: order 44 has no customer"
