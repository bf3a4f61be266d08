"""Job events as table rows: the columns of the Parquet export and of the Spark source.

| column        | type                  | from the event                                     |
|---------------|-----------------------|----------------------------------------------------|
| ``seq``       | int64                 | the event's sequence in ``JSW_<APP>_EVENTS``        |
| ``event``     | string                | ``enqueued``, ``started``, ...                      |
| ``job_id``, ``task``, ``queue`` | string |                                                    |
| ``ts``        | timestamp[us, UTC]    | when it happened (the emitter's clock)              |
| ``attempt``   | int32, nullable       | the server's delivery count (None for ``enqueued``) |
| ``worker``    | string, nullable      | ``host:pid``                                        |
| ``enqueued_at`` | timestamp[us, UTC], nullable |                                             |
| ``queue_wait``, ``duration``, ``delay`` | double, nullable | seconds                      |
| ``outcome``, ``reason`` | string, nullable |                                                 |
"""

from __future__ import annotations

import importlib
import math
from typing import Any

from ._schema import decode_event

#: (name, Arrow type name) of every column, in order.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("seq", "int64"),
    ("event", "string"),
    ("job_id", "string"),
    ("task", "string"),
    ("queue", "string"),
    ("ts", "timestamp"),
    ("attempt", "int32"),
    ("worker", "string"),
    ("enqueued_at", "timestamp"),
    ("queue_wait", "double"),
    ("duration", "double"),
    ("outcome", "string"),
    ("reason", "string"),
    ("delay", "double"),
)

_SPARK_TYPES = {
    "int64": "long",
    "int32": "int",
    "string": "string",
    "timestamp": "timestamp",
    "double": "double",
}

#: The same columns as a Spark DDL schema string (``seq`` is never null, as in Arrow).
SPARK_SCHEMA = ", ".join(
    f"{name} {_SPARK_TYPES[kind]}{' NOT NULL' if name == 'seq' else ''}" for name, kind in COLUMNS
)

#: A row: the column values in order; timestamps as integer microseconds since the epoch.
Row = tuple[Any, ...]

_INSTALL_HINT = "pip install 'jsworker[parquet]'"
_MICROS = 1_000_000
# Timestamps outside years 1..9999 do not fit the column types the readers use.
_MAX_SECONDS = 253_402_300_799.0


def event_row(seq: int, data: bytes) -> Row | None:
    """The row of the event stored at ``seq``, or None when ``data`` is not a usable event.

    Unusable: not a version-1 event record, or a field of the wrong type (a string where a
    number belongs, a number out of range), which would break a whole column otherwise.
    """
    event = decode_event(data)
    if event is None:
        return None
    if not all(isinstance(t, str) for t in (event.event, event.job_id, event.task, event.queue)):
        return None
    if not all(t is None or isinstance(t, str) for t in (event.worker, event.outcome, event.reason)):
        return None
    ts = _micros(event.ts)
    if ts is None:
        return None
    enqueued_at = None
    if event.enqueued_at is not None and (enqueued_at := _micros(event.enqueued_at)) is None:
        return None
    attempt = event.attempt
    if attempt is not None and not (_is_int(attempt) and 0 <= attempt < 2**31):
        return None
    if not all(n is None or _is_number(n) for n in (event.queue_wait, event.duration, event.delay)):
        return None
    return (
        seq,
        event.event,
        event.job_id,
        event.task,
        event.queue,
        ts,
        attempt,
        event.worker,
        enqueued_at,
        _float(event.queue_wait),
        _float(event.duration),
        event.outcome,
        event.reason,
        _float(event.delay),
    )


def _is_int(value: object) -> bool:
    # bool is an int to Python, but true/false in a number field is a broken record.
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)  # type: ignore[arg-type]


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)


def _micros(seconds: object) -> int | None:
    if not _is_number(seconds):
        return None
    assert isinstance(seconds, int | float)
    if not 0 <= seconds <= _MAX_SECONDS:
        return None
    return round(seconds * _MICROS)


def require_pyarrow(module: str = "pyarrow") -> Any:
    """The ``pyarrow`` module (or one of its submodules), or an ImportError saying how to
    install it."""
    try:
        # Imported on first use: pyarrow is an optional extra, and a heavy import.
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"job events as Parquet or Arrow need pyarrow: {_INSTALL_HINT}") from exc


def arrow_schema() -> Any:
    """The Arrow schema of the rows (timestamps in microseconds, UTC)."""
    pa = require_pyarrow()
    types = {
        "int64": pa.int64(),
        "int32": pa.int32(),
        "string": pa.string(),
        "double": pa.float64(),
        "timestamp": pa.timestamp("us", tz="UTC"),
    }
    return pa.schema([pa.field(name, types[kind], nullable=name != "seq") for name, kind in COLUMNS])


def rows_to_batch(rows: list[Row], schema: Any = None) -> Any:
    """A ``pyarrow.RecordBatch`` of ``rows`` (with ``schema``, default :func:`arrow_schema`)."""
    pa = require_pyarrow()
    schema = schema if schema is not None else arrow_schema()
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in COLUMNS]
    arrays = []
    for field, values in zip(schema, columns, strict=True):
        if pa.types.is_timestamp(field.type):
            # Microsecond integers convert far faster than datetime objects would.
            arrays.append(pa.array(values, pa.int64()).cast(field.type))
        else:
            arrays.append(pa.array(values, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
