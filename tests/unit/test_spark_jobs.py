"""Rows to jobs without a SparkSession: job ids, message bodies and headers, column types."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import re
import subprocess
import sys
from decimal import Decimal

import pytest

from ..support import need

try:
    from pyspark.sql import types as T
except ImportError:
    need(False, "pyspark is not installed (pip install 'jsworker[spark]')")

from jsworker import App
from jsworker._errors import ConfigurationError
from jsworker._wire.headers import CONTENT_TYPE, ENQUEUED_AT, MSG_ID, TASK
from jsworker.spark import EnqueueReport
from jsworker.spark._jobs import BadRowError, RowEncoder, job_id
from jsworker.spark._schema import UnsupportedColumnError, converter, plan_columns


def test_job_id_is_a_fixed_function_of_its_inputs() -> None:
    """The same inputs give the same 32-hex id in another process with another hash seed (a
    salted hash() would not), and the value itself never changes between releases."""
    here = job_id("shop", "charge", [42])
    code = "from jsworker.spark._jobs import job_id; print(job_id('shop', 'charge', [42]))"
    other = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345"},
    ).stdout.strip()
    assert here == other == "3cb84a22657ebc22651e06771960e29c"
    assert here == hashlib.sha256(b'["shop","charge",[42]]').hexdigest()[:32]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ((["a", "bc"], None), (["ab", "c"], None)),
        ((["a", "b"], None), (["a"], "b")),
        ((["x"], None), (["x"], "")),
        ((["x"], "1"), (["x"], "2")),
        (([1], None), (["1"], None)),
        (([None], None), (["null"], None)),
        ((["a,b"], None), (["a", "b"], None)),
    ],
)
def test_job_ids_keep_different_inputs_apart(
    a: tuple[list[object], str | None], b: tuple[list[object], str | None]
) -> None:
    """Keys that would run together when concatenated, a run id against one more key column,
    an empty run id against none, and a number against its text all give different ids."""
    assert job_id("shop", "charge", a[0], a[1]) != job_id("shop", "charge", b[0], b[1])


def test_job_id_separates_tasks_and_apps_but_not_app_case() -> None:
    """Another task or app is another job; app names are case-insensitive everywhere."""
    base = job_id("shop", "charge", [1])
    assert job_id("shop", "refund", [1]) != base
    assert job_id("shop2", "charge", [1]) != base
    assert job_id("Shop", "charge", [1]) == base


def _encoder(**overrides: object) -> RowEncoder:
    settings: dict[str, object] = {
        "app": "shop",
        "queue": "billing",
        "task": "charge",
        "columns": ["order_id", "cents"],
        "key": ["order_id"],
        "converters": {},
        "where": " of partition 3",
    }
    settings.update(overrides)
    return RowEncoder(**settings)  # type: ignore[arg-type]


def test_encoded_job_is_what_a_producer_sends() -> None:
    """Subject, the four producer headers, and the {"args", "kwargs"} JSON body."""
    encoder = _encoder()
    body, headers = encoder.encode((7, 990), 0)
    assert encoder.subject("abc") == "jsw.shop.q.billing.charge.abc"
    assert json.loads(body) == {"args": [], "kwargs": {"order_id": 7, "cents": 990}}
    assert headers[MSG_ID] == job_id("shop", "charge", [7])
    assert headers[TASK] == "charge"
    assert headers[CONTENT_TYPE] == "application/json"
    assert abs(int(headers[ENQUEUED_AT]) / 1e9 - dt.datetime.now().timestamp()) < 60


def test_a_partitioned_queue_gets_each_job_where_the_app_puts_it() -> None:
    """With the queue's partitions given, a row's job goes to the partition its id names, as
    the app's own producers and lookups place it."""
    app = App("shop", partitions=4)
    encoder = _encoder(partitions=4)
    subjects = {encoder.subject(f"id{i}") for i in range(40)}
    assert {app.namespace.partition_in(s) for s in subjects} == {0, 1, 2, 3}
    for i in range(40):
        job = f"id{i}"
        assert encoder.subject(job) == app.namespace.job_subject(
            "billing", "charge", job, app.job_partition("billing", job)
        )


def test_args_column_holds_keyword_or_positional_arguments() -> None:
    """A struct value (dict) becomes kwargs, an array value (list) args; other columns are not sent."""
    columns = ["id", "args"]
    kwargs = _encoder(columns=columns, key=["id"], args_column="args")
    assert json.loads(kwargs.encode((1, {"a": 1}), 0)[0]) == {"args": [], "kwargs": {"a": 1}}
    assert json.loads(kwargs.encode((1, [1, "x"]), 0)[0]) == {"args": [1, "x"], "kwargs": {}}
    with pytest.raises(BadRowError, match=r"args column 'args' is null in row 4 of partition 3"):
        kwargs.encode((1, None), 4)


def test_null_key_names_the_column_and_the_row() -> None:
    encoder = _encoder(columns=["region", "order_id"], key=["region", "order_id"])
    with pytest.raises(BadRowError, match=r"key column 'order_id' is null in row 17 of partition 3"):
        encoder.encode(("eu", None), 17)


def test_value_json_cannot_hold_names_the_column() -> None:
    """NaN is not JSON: the error names the column (or the struct field) that holds it."""
    with pytest.raises(BadRowError, match=r"column 'cents' in row 2 of partition 3 cannot be sent as JSON"):
        _encoder().encode((1, math.nan), 2)
    encoder = _encoder(columns=["order_id", "args"], args_column="args")
    with pytest.raises(BadRowError, match=r"field 'x' of column 'args' in row 0"):
        encoder.encode((1, {"ok": 1, "x": math.inf}), 0)
    with pytest.raises(BadRowError, match=r"key column 'order_id' in row 5"):
        _encoder().encode((math.nan, 1), 5)


def test_values_are_converted_to_json_forms() -> None:
    """Decimals become exact strings, dates/times ISO strings, timestamps UTC ISO strings,
    maps objects; nulls stay null at every level."""
    nested = T.StructType(
        [
            T.StructField("price", T.DecimalType(10, 2)),
            T.StructField("days", T.ArrayType(T.DateType())),
            T.StructField("tags", T.MapType(T.StringType(), T.TimestampNTZType())),
        ]
    )
    convert = converter(nested, "s")
    assert convert is not None
    value = {
        "price": Decimal("12.50"),
        "days": [dt.date(2024, 5, 1), None],
        "tags": [("a", dt.datetime(2024, 5, 1, 13, 45))],
    }
    assert convert(value) == {
        "price": "12.50",
        "days": ["2024-05-01", None],
        "tags": {"a": "2024-05-01T13:45:00"},
    }
    assert convert(None) is None
    instant = converter(T.TimestampType(), "ts")
    assert instant is not None
    berlin = dt.timezone(dt.timedelta(hours=2))
    assert instant(dt.datetime(2024, 5, 1, 15, 45, tzinfo=berlin)) == "2024-05-01T13:45:00+00:00"
    small = converter(T.DecimalType(10, 8), "d")
    assert small is not None and small(Decimal("0.00000010")) == "0.00000010"
    if hasattr(T, "TimeType"):  # Spark 4.1+
        time_of_day = converter(T.TimeType(), "t")
        assert time_of_day is not None and time_of_day(dt.time(13, 45)) == "13:45:00"
    assert converter(T.StringType(), "s") is None
    assert converter(T.ArrayType(T.LongType()), "a") is None


@pytest.mark.parametrize(
    ("dtype", "column"),
    [
        (T.BinaryType(), "'blob'"),
        (T.ArrayType(T.BinaryType()), "'blob[]'"),
        (T.StructType([T.StructField("raw", T.BinaryType())]), "'blob.raw'"),
        (T.MapType(T.IntegerType(), T.StringType()), "'blob'"),
        (T.DayTimeIntervalType(), "'blob'"),
    ],
)
def test_unsupported_types_are_refused_by_name(dtype: T.DataType, column: str) -> None:
    schema = T.StructType([T.StructField("id", T.LongType()), T.StructField("blob", dtype)])
    with pytest.raises(UnsupportedColumnError, match=re.escape(f"column {column} has type")):
        plan_columns(schema, ["id"], None)


def test_plan_checks_only_what_a_job_uses() -> None:
    """With an args column, other columns are not sent, so their types do not matter; a
    missing key or an args column of the wrong type is refused."""
    schema = T.StructType(
        [
            T.StructField("id", T.LongType()),
            T.StructField("blob", T.BinaryType()),
            T.StructField("args", T.ArrayType(T.LongType())),
        ]
    )
    assert set(plan_columns(schema, ["id"], "args")) == {"id", "args"}
    with pytest.raises(UnsupportedColumnError):
        plan_columns(schema, ["id"], None)
    with pytest.raises(ConfigurationError, match="column 'nope' is not in the DataFrame"):
        plan_columns(schema, ["nope"], "args")
    with pytest.raises(ConfigurationError, match=r"must be a struct .* or an array"):
        plan_columns(schema, ["id"], "id")


def test_report_reads_well() -> None:
    """A re-run's report says plainly that nothing new was created."""
    report = EnqueueReport(task="charge", rows=50_000, created=0, duplicates=50_000, elapsed=2.5)
    assert str(report) == "charge: 50000 rows, 0 created, 50000 duplicates in 2.5s (20,000 rows/s)"
