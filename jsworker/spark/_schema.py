"""Which Spark column types a job can carry, and how their values become JSON.

Checked against the DataFrame's schema before any partition runs, so a column JSON cannot
hold fails the write at once, by name, instead of halfway through.

| Spark type | JSON |
|---|---|
| string, boolean, integral, float, double, null | as is (NaN and infinity fail the row) |
| decimal | string, exact (``"12.50"``): floats would round money |
| date, time | ISO string (``"2024-05-01"``, ``"13:45:00"``) |
| timestamp | ISO string in UTC with offset (``"2024-05-01T13:45:00+00:00"``) |
| timestamp_ntz | ISO string without offset |
| array | list; struct: object; map with string keys: object |
| binary, intervals, variant, geometry, maps with other keys | refused: convert them in SQL first |
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    ByteType,
    CharType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
    VarcharType,
)

from .._errors import ConfigurationError
from .._errors import UnsupportedColumnError as UnsupportedColumnError
from ._jobs import Converter

_AS_IS = (
    StringType,
    CharType,
    VarcharType,
    BooleanType,
    ByteType,
    ShortType,
    IntegerType,
    LongType,
    FloatType,
    DoubleType,
    NullType,
)

_HINTS = {
    "binary": "encode it first, e.g. base64(col)",
}


def _nullable(convert: Converter) -> Converter:
    return lambda v: None if v is None else convert(v)


def _decimal(value: Decimal) -> str:
    return format(value, "f")  # never exponent notation: "1E-7" would surprise a parser


def _instant(value: dt.datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC).isoformat()


def _iso(value: dt.date | dt.time | dt.datetime) -> str:
    return value.isoformat()


def converter(dtype: DataType, column: str) -> Converter | None:
    """How values of ``dtype`` become JSON-ready; None when they already are.

    Raises :class:`UnsupportedColumnError` naming ``column`` (a path such as ``a.b[]`` for
    nested fields) when the type cannot be sent.
    """
    if isinstance(dtype, _AS_IS):
        return None
    if isinstance(dtype, DecimalType):
        return _nullable(_decimal)
    if isinstance(dtype, TimestampType):
        return _nullable(_instant)
    if isinstance(dtype, DateType | TimestampNTZType) or dtype.typeName() == "time":  # TimeType: Spark 4.1+
        return _nullable(_iso)
    if isinstance(dtype, ArrayType):
        inner = converter(dtype.elementType, f"{column}[]")
        return None if inner is None else _nullable(lambda v: [inner(x) for x in v])
    if isinstance(dtype, StructType):
        fields = [(f.name, converter(f.dataType, f"{column}.{f.name}")) for f in dtype.fields]
        wanted = [(name, conv) for name, conv in fields if conv is not None]
        if not wanted:
            return None
        return _nullable(lambda v: {**v, **{name: conv(v[name]) for name, conv in wanted}})
    if isinstance(dtype, MapType):
        if not isinstance(dtype.keyType, StringType | CharType | VarcharType):
            raise _unsupported(column, dtype, "JSON object keys are strings; cast the keys to string")
        value = converter(dtype.valueType, f"{column}{{}}") or (lambda v: v)
        # Arrow hands maps over as lists of (key, value) pairs.
        return _nullable(lambda pairs: {k: value(v) for k, v in pairs})
    raise _unsupported(column, dtype, _HINTS.get(dtype.typeName(), "convert it in SQL first"))


def _unsupported(column: str, dtype: DataType, hint: str) -> UnsupportedColumnError:
    return UnsupportedColumnError(
        f"column {column!r} has type {dtype.simpleString()}, which a JSON job argument cannot hold: {hint}"
    )


def plan_columns(
    schema: StructType, key: Sequence[str], args_column: str | None
) -> dict[str, Converter | None]:
    """Converters of the columns a job uses (key columns and arguments), checked up front.

    Raises :class:`ConfigurationError` for a missing key or args column, an args column that
    is neither a struct nor an array, and :class:`UnsupportedColumnError` for a used column
    JSON cannot hold. Columns a job does not use are not checked.
    """
    types: dict[str, Any] = {f.name: f.dataType for f in schema.fields}
    if not key:
        raise ConfigurationError("the 'key' option must name the column(s) that as_job_run a job")
    for name in [*key, *([args_column] if args_column else [])]:
        if name not in types:
            raise ConfigurationError(f"column {name!r} is not in the DataFrame (columns: {', '.join(types)})")
    if args_column is not None and not isinstance(types[args_column], StructType | ArrayType):
        raise ConfigurationError(
            f"args column {args_column!r} must be a struct (keyword arguments) or an array "
            f"(positional arguments), not {types[args_column].simpleString()}"
        )
    used = list(types) if args_column is None else list(dict.fromkeys([*key, args_column]))
    return {name: converter(types[name], name) for name in used}
