"""Enqueue a DataFrame's rows as jobs of a declared task, and say what happened."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import StructType

from .._errors import ConfigurationError
from ._options import Connect
from ._publish import DEFAULT_TIMEOUT, DEFAULT_WINDOW, ensure_streams
from ._schema import plan_columns
from ._writer import NAME, JobsDataSource

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from .._enqueue.task import Task


@dataclass(frozen=True, slots=True)
class EnqueueReport:
    """The outcome of :func:`enqueue_dataframe`.

    ``created`` counts jobs the server stored new, ``duplicates`` jobs it already had (from an
    earlier write within the duplicate window, or from a failed attempt of this one that Spark
    retried); together they are ``rows``. ``elapsed`` is in seconds.
    """

    task: str
    rows: int
    created: int
    duplicates: int
    elapsed: float

    def __str__(self) -> str:
        rate = self.rows / self.elapsed if self.elapsed > 0 else 0.0
        return (
            f"{self.task}: {self.rows} rows, {self.created} created, {self.duplicates} duplicates "
            f"in {self.elapsed:.1f}s ({rate:,.0f} rows/s)"
        )


def enqueue_dataframe(
    df: DataFrame,
    task: Task[..., Any],
    *,
    key: str | Sequence[str],
    run_id: str | None = None,
    args_column: str | None = None,
    window: int = DEFAULT_WINDOW,
    timeout: float = DEFAULT_TIMEOUT,
) -> EnqueueReport:
    """Enqueue one job of ``task`` per row of ``df`` and wait until every one is stored.

    ``key`` names the column(s) whose values as_job_run a job: writing the same rows again
    within the stream's duplicate window creates nothing new. A new ``run_id`` makes new ids
    for the same rows, to run them again on purpose. Columns become keyword arguments, or
    ``args_column`` holds them (a struct: keyword arguments; an array: positional ones).
    Servers, credentials, queue and job events come from ``task.app``.

    The schema and the task's signature are checked before anything is sent; a null key or
    a value JSON cannot hold fails the write naming the column. Raises whatever the Spark
    write raises when a partition fails for good (jobs stored until then stay stored, and
    writing again is safe). This blocks: in async code, call it through
    ``asyncio.to_thread``.
    """
    started = time.perf_counter()
    keys = [key] if isinstance(key, str) else list(key)
    totals = write_jobs(
        df, task, keys, run_id=run_id, args_column=args_column, window=window, timeout=timeout
    )
    return EnqueueReport(
        task=task.name,
        rows=totals["rows"],
        created=totals["created"],
        duplicates=totals["duplicates"],
        elapsed=time.perf_counter() - started,
    )


def write_jobs(
    df: DataFrame,
    task: Task[..., Any],
    keys: list[str],
    *,
    run_id: str | None,
    args_column: str | None,
    window: int,
    timeout: float,
    receipts: bool = False,
) -> dict[str, Any]:
    """Write ``df``'s rows as jobs of ``task`` (see :func:`enqueue_dataframe`); the writer's
    totals, with each job's ``receipts`` (id, stream sequence) when asked for."""
    plan_columns(df.schema, keys, args_column)
    _check_signature(task, df.schema, args_column)
    app = task.app
    asyncio.run(ensure_streams(app))
    options = {
        "app": app.name,
        "task": task.name,
        "queue": task.queue,
        "partitions": str(app.queue_partitions(task.queue)),
        "key": ",".join(keys),
        "window": str(window),
        "timeout": str(timeout),
        "events": "true" if app.options.events else "false",
        "receipts": "true" if receipts else "false",
        **Connect.options_of(app.connect_options("producer", "spark")),
    }
    if run_id is not None:
        options["run_id"] = run_id
    if args_column is not None:
        options["args_column"] = args_column
    df.sparkSession.dataSource.register(JobsDataSource)
    with tempfile.TemporaryDirectory(prefix="jsworker-spark-") as tmp:
        options["report_path"] = os.path.join(tmp, "report.json")
        df.write.format(NAME).mode("append").options(**options).save()
        with open(options["report_path"], encoding="utf-8") as report:
            totals: dict[str, Any] = json.load(report)
    return totals


def _check_signature(task: Task[..., Any], schema: StructType, args_column: str | None) -> None:
    """Fail before writing when the columns (or struct fields) cannot bind to the task's parameters."""
    if args_column is None:
        names = schema.fieldNames()
    else:
        packed = schema[args_column].dataType
        if not isinstance(packed, StructType):
            return  # positional arguments: how many each row holds is only known per row
        names = packed.fieldNames()
    try:
        task.check_arguments((), dict.fromkeys(names))
    except TypeError as exc:
        raise ConfigurationError(f"the DataFrame does not fit the task's parameters: {exc}") from None
