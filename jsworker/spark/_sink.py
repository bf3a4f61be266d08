"""``df.writeStream.format("jsworker")``: every row of every micro-batch becomes one job, once.

Exactly once rests on two things the server keeps:

* **Job ids derive from each row's key** (and ``run_id``), as in a batch write: a micro-batch
  Spark runs again (a task retried, a query restarted from its checkpoint) publishes the same
  ids, and the job stream drops the repeats within its duplicate window.
* **Each committed micro-batch is recorded** in the app's sinks stream (``JSW_<APP>_SINKS``,
  ``App(spark_sinks=True)``), once its every partition's jobs were acknowledged, and kept 30
  days. A partition of a batch found recorded publishes nothing: a query restarted the next
  morning, past the duplicate window, skips the batch it had committed before it stopped.

What neither covers: a batch that was not committed (the query stopped during it) and is run
again after the duplicate window makes again the jobs of it that had been written and have
already run. Keep the duplicate window above the longest a stopped query stays down, or the
checkpoint's batches small.

A batch's record sits on a subject derived from the app, the query's id (which Spark keeps in
its checkpoint) and the batch id, hashed: a producer, who may write that stream, cannot tell
which subject a future batch of another query will use. The stream allows no rollup and no
per-message time to live, so nobody removes a record early.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from .._core.layout import sinks_spec
from .._errors import ConfigurationError, PermissionDeniedError
from .._observability.logging import get_logger
from .._wire.names import Namespace
from ..jetstream.connection import Connection
from ..jetstream.limits_stream import LimitsStream, StreamNotFoundError
from ..jetstream.stored import SubjectMoved, write
from ..jetstream.topology import apply_stream
from ._publish import PartitionResult, WriteSettings, publish_rows

log = get_logger("jsworker.spark")

# Local properties Spark gives the tasks of a micro-batch: its id, and the query's (the same
# across restarts from one checkpoint).
_BATCH_ID = "streaming.sql.batchId"
_QUERY_ID = "sql.streaming.queryId"


def batch_token(app: str, query: str, batch: int) -> str:
    """The last token of the subject recording micro-batch ``batch`` of query ``query``."""
    doc = json.dumps([Namespace(app).app, query, batch], separators=(",", ":"))
    return hashlib.sha256(doc.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class SinkPartition(WriterCommitMessage):
    """What one partition of a micro-batch did: its counts, or ``skipped`` when the batch was
    recorded as committed already. ``query`` is the query's id (the driver's commit has none)."""

    result: PartitionResult
    query: str
    skipped: bool = False


class JobsStreamWriter(DataSourceStreamArrowWriter):
    """Publishes a micro-batch's partitions (executors) and records the batch (driver)."""

    def __init__(self, settings: WriteSettings, schema: StructType) -> None:
        self.settings = settings
        self.schema = schema

    def write(self, iterator: Iterator[Any]) -> SinkPartition:
        """Publish one partition of the micro-batch, unless the batch was committed before."""
        context = TaskContext.get()
        if context is None:
            raise ConfigurationError("the jsworker streaming sink runs in Spark tasks only")
        query, batch = context.getLocalProperty(_QUERY_ID), context.getLocalProperty(_BATCH_ID)
        if query is None or batch is None:
            raise ConfigurationError("the jsworker streaming sink runs in a streaming query only")
        return asyncio.run(
            _write(iterator, self.settings, self.schema, context.partitionId(), query, int(batch))
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Record the micro-batch as committed, with its counts (and log them)."""
        parts = [m for m in messages if isinstance(m, SinkPartition)]
        if not parts or all(p.skipped for p in parts):
            return
        counts = {
            "rows": sum(p.result.rows for p in parts),
            "created": sum(p.result.created for p in parts),
            "duplicates": sum(p.result.duplicates for p in parts),
        }
        asyncio.run(_record(self.settings, parts[0].query, batchId, counts))
        log.info("spark.sink_batch", app=self.settings.app, task=self.settings.task, batch=batchId, **counts)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Leave the jobs stored: the batch runs again, and its jobs' ids are the same."""


async def _write(
    batches: Iterator[Any],
    settings: WriteSettings,
    schema: StructType,
    partition: int,
    query: str,
    batch: int,
) -> SinkPartition:
    app = settings.make_app()
    ns = app.namespace
    conn = await Connection.open(app.connect_options("producer", "spark-sink"))
    try:
        subject = ns.sink_subject(batch_token(settings.app, query, batch))
        if await LimitsStream(conn, ns.sinks_stream).last(subject, stream_required=True) is not None:
            return SinkPartition(PartitionResult(partition, 0, 0, 0), query, skipped=True)
        result = await publish_rows(conn, app, batches, settings, schema, partition)
        return SinkPartition(result, query)
    finally:
        await conn.close()


async def _record(settings: WriteSettings, query: str, batch: int, counts: dict[str, int]) -> None:
    app = settings.make_app()
    ns = app.namespace
    conn = await Connection.open(app.connect_options("producer", "spark-sink"))
    try:
        body = json.dumps({"batch": batch, "at": time.time(), **counts}).encode()
        subject = ns.sink_subject(batch_token(settings.app, query, batch))
        # Recorded already (SubjectMoved): this batch ran again after a commit Spark did not note.
        with contextlib.suppress(SubjectMoved):
            await write(conn, subject, body, {}, expect_last=0)
    finally:
        await conn.close()


async def ensure_sink_stream(settings: WriteSettings) -> None:
    """Create the sinks stream where this user may, else say how to have it made."""
    app = settings.make_app()
    conn = await Connection.open(app.connect_options("producer", "spark-sink"))
    try:
        ns = app.namespace
        # Asked as a producer may ask (a read of one subject): a missing stream says so.
        with contextlib.suppress(StreamNotFoundError):
            await LimitsStream(conn, ns.sinks_stream).last(ns.sink_subject("0" * 32), stream_required=True)
            return
        try:
            await apply_stream(conn, sinks_spec(app))
        except PermissionDeniedError as exc:  # ProvisioningNeeded, or not even a stream's info
            raise ConfigurationError(
                f"the jsworker streaming sink records its batches in {app.namespace.sinks_stream}, which "
                f"does not exist: declare App({settings.app!r}, spark_sinks=True) and run jsworker provision"
            ) from exc
    finally:
        await conn.close()
