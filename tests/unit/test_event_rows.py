"""Job events as rows (no server): time parsing, event -> row, Arrow batches."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta, timezone

import pyarrow as pa  # type: ignore[import-untyped]
import pytest

from jsworker.events import JobEvent, encode_event
from jsworker.events._reader import parse_time, to_unix
from jsworker.events._rows import (
    COLUMNS,
    SPARK_SCHEMA,
    arrow_schema,
    event_row,
    require_pyarrow,
    rows_to_batch,
)

NOW = 1_790_000_000.0


@pytest.mark.parametrize(
    ("text", "ago"),
    [("90s", 90), ("30m", 1800), ("1h", 3600), ("1.5h", 5400), ("7d", 7 * 86400), ("2w", 14 * 86400)],
)
def test_relative_times_count_back_from_now(text: str, ago: float) -> None:
    assert parse_time(text, now=NOW) == NOW - ago
    assert parse_time(f" {text.upper()} ", now=NOW) == NOW - ago


def test_absolute_times() -> None:
    at = datetime(2026, 11, 22, 8, 30, tzinfo=UTC).timestamp()
    assert parse_time("2026-11-22T08:30:00Z") == at
    assert parse_time("2026-11-22T08:30:00") == at  # no offset: UTC
    assert parse_time("2026-11-22T09:30:00+01:00") == at
    assert parse_time("2026-11-22") == datetime(2026, 11, 22, tzinfo=UTC).timestamp()
    assert parse_time("now", now=NOW) == NOW


@pytest.mark.parametrize("text", ["", "yesterday", "5", "5y", "-3h", "1h30m"])
def test_bad_times(text: str) -> None:
    with pytest.raises(ValueError, match="not a time"):
        parse_time(text, now=NOW)


def test_to_unix() -> None:
    assert to_unix(12.5) == 12.5
    assert to_unix(datetime(1970, 1, 1, 0, 0, 10)) == 10.0
    assert to_unix(datetime(1970, 1, 1, 1, 0, 10, tzinfo=timezone(timedelta(hours=1)))) == 10.0
    assert to_unix("1970-01-01T00:00:20Z") == 20.0


def test_full_event_to_row() -> None:
    event = JobEvent(
        event="started",
        job_id="j1",
        task="charge",
        queue="default",
        ts=1.5,
        attempt=2,
        worker="h:1",
        enqueued_at=1.25,
        queue_wait=0.25,
        duration=None,
        outcome=None,
        reason=None,
        delay=None,
    )
    row = event_row(7, encode_event(event))
    expected = (7, "started", "j1", "charge", "default", 1_500_000, 2, "h:1", 1_250_000, 0.25)
    assert row == (*expected, None, None, None, None)
    assert len(expected) + 4 == len(COLUMNS)


def test_integers_in_float_fields_become_floats_and_unknown_fields_are_ignored() -> None:
    data = (
        b'{"v":1,"event":"failed","job_id":"j","task":"t","queue":"q","ts":2,"duration":3,"delay":1,"new":0}'
    )
    row = event_row(1, data)
    assert row is not None
    assert row[5] == 2_000_000 and row[10] == 3.0 and isinstance(row[10], float)
    assert row[13] == 1.0 and isinstance(row[13], float)


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[1, 2]",
        b'{"v":2,"event":"started","job_id":"j","task":"t","queue":"q","ts":1}',  # unknown version
        b'{"v":1,"event":"started","job_id":"j","task":"t","queue":"q"}',  # no ts
        b'{"v":1,"event":"started","job_id":"j","task":"t","queue":"q","ts":"1"}',
        b'{"v":1,"event":"started","job_id":"j","task":"t","queue":"q","ts":true}',
        b'{"v":1,"event":"started","job_id":"j","task":"t","queue":"q","ts":1e300}',
        b'{"v":1,"event":"started","job_id":"j","task":"t","queue":"q","ts":-1}',
        b'{"v":1,"event":"started","job_id":7,"task":"t","queue":"q","ts":1}',
        b'{"v":1,"event":"started","job_id":"j","task":"t","queue":"q","ts":1,"attempt":1.5}',
        b'{"v":1,"event":"started","job_id":"j","task":"t","queue":"q","ts":1,"attempt":4294967296}',
        b'{"v":1,"event":"started","job_id":"j","task":"t","queue":"q","ts":1,"worker":3}',
        b'{"v":1,"event":"started","job_id":"j","task":"t","queue":"q","ts":1,"queue_wait":"x"}',
        b'{"v":1,"event":"started","job_id":"j","task":"t","queue":"q","ts":1,"enqueued_at":"x"}',
    ],
)
def test_unusable_records_give_no_row(data: bytes) -> None:
    assert event_row(1, data) is None


def test_rows_to_arrow_batch() -> None:
    rows = [
        event_row(1, encode_event(JobEvent("enqueued", "j", "t", "q", ts=1.0, enqueued_at=1.0))),
        event_row(2, encode_event(JobEvent("succeeded", "j", "t", "q", ts=3.0, attempt=1, duration=2.0))),
    ]
    batch = rows_to_batch([r for r in rows if r is not None])
    assert batch.schema == arrow_schema()
    assert batch.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert batch.to_pylist()[1] == {
        "seq": 2,
        "event": "succeeded",
        "job_id": "j",
        "task": "t",
        "queue": "q",
        "ts": datetime(1970, 1, 1, 0, 0, 3, tzinfo=UTC),
        "attempt": 1,
        "worker": None,
        "enqueued_at": None,
        "queue_wait": None,
        "duration": 2.0,
        "outcome": None,
        "reason": None,
        "delay": None,
    }
    assert rows_to_batch([]).num_rows == 0


def test_spark_schema_names_every_column_in_order() -> None:
    assert [part.split()[0] for part in SPARK_SCHEMA.split(", ")] == [name for name, _ in COLUMNS]
    assert (
        "ts timestamp" in SPARK_SCHEMA
        and "attempt int" in SPARK_SCHEMA
        and "seq long NOT NULL" in SPARK_SCHEMA
    )


def test_missing_pyarrow_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ImportError, match=r"pip install 'jsworker\[parquet\]'"):
        require_pyarrow("pyarrow.parquet")
