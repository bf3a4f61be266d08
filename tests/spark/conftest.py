"""A local SparkSession shared by the Spark tests (one JVM for the whole run).

Every test here is marked ``spark``. Without pyspark or Java the tests skip, except under
CI, where skipping would hide a broken install: there they fail.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from ..support import need


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A ``local[2,4]`` SparkSession: two cores, and up to 4 attempts per task so task
    retries can be exercised (plain ``local[N]`` never retries a task)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        need(False, "pyspark is not installed (pip install 'jsworker[spark]')")
    need(
        shutil.which("java") is not None or bool(os.environ.get("JAVA_HOME")), "Spark needs Java 17+ on PATH"
    )
    # Python workers start 'python3' from PATH unless told otherwise; they must run this
    # interpreter, the one jsworker is installed in.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # A Python data source's reader runs in a Python process Spark starts for it, which must
    # connect back within 10 s (fixed in Spark): it finds jsworker's bytecode written (see
    # pytest_configure in tests/conftest.py), not compiled again at every start.
    session = (
        SparkSession.builder.master("local[2,4]")
        .appName("jsworker-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        # The C1 compiler alone starts faster; the tests are short.
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
