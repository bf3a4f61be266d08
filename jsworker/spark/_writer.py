"""``df.write.format("jsworker")`` and ``df.writeStream.format("jsworker")``: every row of a
DataFrame becomes one job.

A Spark 4 Python data source. Planning runs on the driver's host: options and the schema are
checked there (an unsupported column fails the write before any partition runs) and the
app's streams are created if the job stream does not exist yet. Each partition then publishes
its rows (:mod:`._publish`); a streaming query's micro-batches are recorded once committed
(:mod:`._sink`).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from .._errors import ConfigurationError
from ._publish import PartitionResult, WriteSettings, ensure_streams, write_partition
from ._schema import plan_columns
from ._sink import JobsStreamWriter, ensure_sink_stream

NAME = "jsworker"
"""The format name: ``df.write.format("jsworker")``."""


class JobsDataSource(DataSource):
    """The ``jsworker`` format: append each row of a DataFrame as one job.

    Options: ``app``, ``task`` and ``key`` (a column, or comma-separated columns, whose values
    as_job_run the job) are required. ``queue`` (default ``default``); ``servers`` (comma
    separated, else ``JSWORKER_URL``); ``user``, ``password``, ``token``, ``creds``,
    ``nkey_seed``, ``tls_ca``, ``tls_cert``, ``tls_key`` (else the ``JSWORKER_*`` variables
    of the process that connects); ``run_id`` (part of every job id: a new value enqueues the
    same rows again on purpose); ``args_column`` (a struct column holding keyword arguments
    or an array column holding positional ones; without it every column is a keyword
    argument); ``window`` (acknowledgements in flight per partition, default 500);
    ``timeout`` (seconds without an acknowledgement before a partition fails, default 30);
    ``events`` (``true``: emit ``enqueued`` job events, as ``App(events=True)`` does);
    ``report_path`` (a file on the driver's host that receives the totals as JSON);
    ``receipts`` (``true``: the report also lists each job's id and stream sequence).
    """

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return NAME

    def writer(self, schema: StructType, overwrite: bool) -> JobsWriter:
        """Check the options and the schema and make sure the job stream exists."""
        if overwrite:
            raise ConfigurationError(
                "the jsworker writer only appends jobs (mode 'append'); it cannot overwrite a queue"
            )
        settings = WriteSettings.from_options(self.options)
        plan_columns(schema, settings.key, settings.args_column)
        asyncio.run(ensure_streams(settings.make_app()))
        return JobsWriter(settings, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> JobsStreamWriter:
        """The streaming sink (``df.writeStream.format("jsworker")``): the same options, and
        the app's sinks stream (``App(spark_sinks=True)``) to record committed micro-batches."""
        if overwrite:
            raise ConfigurationError("the jsworker sink only appends jobs (output mode 'append')")
        settings = WriteSettings.from_options(self.options)
        plan_columns(schema, settings.key, settings.args_column)
        asyncio.run(ensure_streams(settings.make_app()))
        asyncio.run(ensure_sink_stream(settings))
        return JobsStreamWriter(settings, schema)


class JobsWriter(DataSourceArrowWriter):
    """Publishes partitions (on the executors) and totals them (on the driver's host)."""

    def __init__(self, settings: WriteSettings, schema: StructType) -> None:
        self.settings = settings
        self.schema = schema

    def write(self, iterator: Iterator[Any]) -> PartitionResult:
        """Publish one partition (Arrow record batches); returns once every job is acknowledged."""
        context = TaskContext.get()
        partition = context.partitionId() if context else 0
        return asyncio.run(write_partition(iterator, self.settings, self.schema, partition))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Total the partitions' counts; written to ``report_path`` when one is set."""
        results = [m for m in messages if isinstance(m, PartitionResult)]
        totals: dict[str, Any] = {
            "partitions": len(results),
            "rows": sum(r.rows for r in results),
            "created": sum(r.created for r in results),
            "duplicates": sum(r.duplicates for r in results),
        }
        if self.settings.receipts:
            totals["receipts"] = [receipt for r in results for receipt in r.receipts]
        if self.settings.report_path is not None:
            temporary = f"{self.settings.report_path}.partial"
            with open(temporary, "w", encoding="utf-8") as out:
                json.dump(totals, out)
            os.replace(temporary, self.settings.report_path)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Leave the stored jobs where they are: writing again within the stream's duplicate
        window stores only the ones still missing."""
