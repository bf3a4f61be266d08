"""What the tests of the Spark examples share: loading an example script as a module, and the
DataFrame of orders with a known mix of outcomes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

EXAMPLES = Path(__file__).parents[2] / "examples" / "spark_pipeline"


def load_example(script: str) -> ModuleType:
    """``examples/spark_pipeline/<script>.py`` as a module."""
    spec = importlib.util.spec_from_file_location(f"spark_pipeline_{script}", EXAMPLES / f"{script}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def known_mix(spark: Any) -> Any:
    """45 orders: 30 succeed at once, 10 fail once and succeed on their retry, 5 are rejected."""
    rows = [(i, 100 + i, 30 <= i < 40, i >= 40) for i in range(45)]
    return spark.createDataFrame(rows, "order_id long, cents long, flaky boolean, bad boolean")
