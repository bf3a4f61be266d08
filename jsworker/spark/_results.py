"""Jobs' results as DataFrame columns: each row's job id from its key, and what the jobs bucket
says of each job, read in the DataFrame's own partitions.

Both run in the DataFrame's partitions: the executors compute ids and read records, each
partition on a connection of its own (connections cannot travel to executors), so nothing
passes through the driver. A record is read with one ``MSG.GET`` of the bucket, which a
producer may make; a job with no finished record of its own (running, waiting, or its record
expired) is asked about as ``app.astatus`` asks, of the workers.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import DoubleType, IntegerType, StringType, StructField, StructType, TimestampType

from .._errors import ConfigurationError
from .._lifecycle.bucket import Records
from .._lifecycle.state import JobRecord, JobState
from ..jetstream.connection import Connection
from ._jobs import RowEncoder
from ._options import Connect
from ._schema import plan_columns

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from .._core.view import AppView

#: The column of a row's job id.
JOB_ID = "job_id"
#: What the results add to each row: the job's state, its result as JSON text (None unless it
#: succeeded with a result kept), its error (``Type: message``), its attempts, how long its last
#: run took (seconds) and when it ended.
RESULT_FIELDS = (
    StructField("state", StringType()),
    StructField("result", StringType()),
    StructField("error", StringType()),
    StructField("attempts", IntegerType()),
    StructField("duration", DoubleType()),
    StructField("finished_at", TimestampType()),
)
# Records read at once by one partition: a server answers many more a second, and a partition
# holds their answers only.
_READS_AT_ONCE = 256


@dataclass(frozen=True, slots=True)
class ResultSource:
    """Where an executor reads the records of app ``app`` from (picklable: it travels with the
    plan)."""

    app: str
    connect: Connect = field(default_factory=Connect)

    @classmethod
    def of(cls, app: AppView) -> ResultSource:
        """The source of ``app``'s records, connecting as its producers do."""
        return cls(
            app.name, Connect.from_options(Connect.options_of(app.connect_options("producer", "spark")))
        )


def with_job_ids(df: DataFrame, app: str, task: str, keys: Sequence[str], run_id: str | None) -> DataFrame:
    """``df``'s key columns and the id of each row's job (:data:`JOB_ID`), as the writer makes
    them (:func:`~jsworker.spark.job_id`)."""
    keyed = df.select(*keys)
    schema = StructType([*keyed.schema.fields, StructField(JOB_ID, StringType(), nullable=False)])
    converters = plan_columns(keyed.schema, keys, None)
    make = functools.partial(_ids, app, task, list(keys), run_id, converters)
    # Partitions of rows, not Arrow batches: mapInArrow would need pandas on every executor.
    return df.sparkSession.createDataFrame(keyed.rdd.mapPartitions(make), schema)


def _ids(
    app: str, task: str, keys: list[str], run_id: str | None, converters: Any, rows: Iterator[Any]
) -> Iterator[tuple[Any, ...]]:
    encoder = RowEncoder(
        app=app, queue="default", task=task, columns=keys, key=keys, converters=converters, run_id=run_id
    )
    for position, row in enumerate(rows):
        (converted,) = zip(*encoder.convert([[value] for value in row]), strict=True)
        yield (*row, encoder.job_id(converted, position))


def read_results(ids: DataFrame, source: ResultSource, *, seq_column: str | None = None) -> DataFrame:
    """``ids`` (a DataFrame with a :data:`JOB_ID` column) with what each job came to (the
    columns of :data:`RESULT_FIELDS`), read in ``ids``' own partitions.

    ``seq_column`` names a column of each job's message sequence: a record of an earlier job
    under the same id (a key enqueued again after the duplicate window) is then not taken for
    this one's. A job with no finished record of its own has the state its status gives
    (``queued``, ``running``, ``retrying``...), ``unknown`` when nothing is known of it any
    more (its record expired after ``result_ttl``).
    """
    if JOB_ID not in ids.columns:
        raise ConfigurationError(
            f"read_results needs a {JOB_ID!r} column (columns: {', '.join(ids.columns)})"
        )
    schema = StructType([*ids.schema.fields, *RESULT_FIELDS])
    seq_at = ids.columns.index(seq_column) if seq_column is not None else None
    read = functools.partial(_read, source, ids.columns.index(JOB_ID), seq_at)
    return ids.sparkSession.createDataFrame(ids.rdd.mapPartitions(read), schema)


def _read(
    source: ResultSource, id_at: int, seq_at: int | None, rows: Iterator[Any]
) -> Iterator[tuple[Any, ...]]:
    # One loop for the whole partition; rows are read a window at a time and handed on.
    with asyncio.Runner() as runner:
        app = source.connect.app(source.app)
        conn = runner.run(Connection.open(app.connect_options("producer", "spark-results")))
        try:
            records = Records(conn, app.namespace)
            while window := list(itertools.islice(rows, _READS_AT_ONCE)):
                found = runner.run(
                    _states(
                        app, records, [(r[id_at], r[seq_at] if seq_at is not None else None) for r in window]
                    )
                )
                for row, (state, record) in zip(window, found, strict=True):
                    yield (*row, *_row(state, record))
        finally:
            runner.run(conn.close())
            runner.run(app.aclose())


async def _states(
    app: AppView, records: Records, jobs: list[tuple[str, int | None]]
) -> list[tuple[JobState, JobRecord | None]]:
    return list(await asyncio.gather(*(_state(app, records, job_id, seq) for job_id, seq in jobs)))


async def _state(
    app: AppView, records: Records, job_id: str, seq: int | None
) -> tuple[JobState, JobRecord | None]:
    """The job's state and its own record (finished, or waiting for its next attempt)."""
    found = await records.read(job_id)
    record = found[1] if found is not None else None
    own = record is not None and (seq is None or record.seq == seq)
    if own and record is not None and (record.state.finished or record.state.resting):
        return record.state, record
    # Running, waiting, or known no more: as its status says.
    status = await app.lifecycle.status(job_id)
    return status.state, None


def _row(state: JobState, record: JobRecord | None) -> tuple[Any, ...]:
    if record is None:
        return (state.value, None, None, None, None, None)
    result = None
    if record.value is not None and record.content_type == "application/json":
        result = record.value.decode()
    error = None if record.error is None else f"{record.error.type}: {record.error.message}"
    duration = None
    if record.started_at is not None and record.finished_at is not None:
        duration = record.finished_at - record.started_at
    finished = None if record.finished_at is None else datetime.fromtimestamp(record.finished_at, UTC)
    return (state.value, result, error, record.attempts or None, duration, finished)
