"""examples/spark_pipeline/roundtrip.py with real workers: every row comes back with its
result (parsed to columns) or its failure, written to Parquet and read back."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from jsworker.testing import NatsServer

pytestmark = pytest.mark.timeout(240)

EXAMPLE = Path(__file__).parents[2] / "examples" / "spark_pipeline" / "roundtrip.py"


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("spark_roundtrip", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_every_row_comes_back_with_its_result(spark: Any, nats_server: NatsServer, tmp_path: Path) -> None:
    example = _example()
    # 30 succeed at once, 10 fail once and succeed on their retry, 5 are rejected.
    rows = [(i, 100 + i, 30 <= i < 40, i >= 40) for i in range(45)]
    df = spark.createDataFrame(rows, "order_id long, cents long, flaky boolean, bad boolean")
    out = tmp_path / "priced"
    states = example.round_trip(spark, df, nats_server.url, out, tmp_path / "workers.log", workers=1)
    assert states == {"succeeded": 40, "failed": 5}
    back = {r.order_id: r for r in spark.read.parquet(str(out)).collect()}
    assert sorted(back) == list(range(45))
    assert (back[3].result.cents, back[3].result.tax, back[3].attempts) == (103, 20, 1)
    assert back[35].attempts == 2 and back[35].state == "succeeded"  # failed once, then priced
    assert back[44].state == "failed" and back[44].error == "Reject: order 44 has no customer"
