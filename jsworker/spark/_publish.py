"""Publishing a DataFrame partition's rows as jobs, for the batch writer and the streaming
sink alike: the writer's options, one partition's rows published with many acknowledgements in
flight, and what the partition stored.

Each partition opens its own connection, publishes its rows, waits for every acknowledgement and
reports how many jobs were new and how many the server already had. Any error or missing
acknowledgement fails the partition, so Spark retries it; the retry publishes the same job ids
and the server's dedup drops what the failed attempt already stored.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import StructType

from .._app import App
from .._core.view import AppView
from .._errors import ConfigurationError
from .._wire.headers import MSG_ID
from .._wire.names import validate_app_name, validate_name
from ..events._emit import EventEmitter
from ..jetstream.connection import Connection
from ..jetstream.message import OutMessage, Stored
from ..jetstream.pipeline import AckPipeline, StoredHook
from ..jetstream.topology import stream_exists
from ._jobs import RowEncoder
from ._options import Connect, integer, names
from ._schema import plan_columns

DEFAULT_WINDOW = 500
"""Acknowledgements a partition keeps outstanding; past a few hundred throughput stays flat."""

DEFAULT_TIMEOUT = 30.0
"""Seconds without an acknowledgement after which a partition gives up (and Spark retries it)."""


@dataclass(frozen=True, slots=True)
class WriteSettings:
    """The writer's options, parsed and checked (see :class:`JobsDataSource`)."""

    app: str
    task: str
    queue: str
    key: tuple[str, ...]
    connect: Connect = field(default_factory=Connect)
    run_id: str | None = None
    args_column: str | None = None
    window: int = DEFAULT_WINDOW
    timeout: float = DEFAULT_TIMEOUT
    events: bool = False
    report_path: str | None = None
    #: Whether the report lists each job's id and stream sequence (what ``map_dataframe``
    #: waits for).
    receipts: bool = False
    #: The queue's partitions (``App(partitions=N)``): the job streams its jobs spread over.
    partitions: int = 1

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> WriteSettings:
        """Parse Spark's write options; raises :class:`ConfigurationError` naming a bad one."""
        for required in ("app", "task", "key"):
            if not options.get(required):
                raise ConfigurationError(f"the jsworker writer needs the {required!r} option")
        return cls(
            app=validate_app_name(options["app"]),
            task=validate_name("task", options["task"]),
            queue=validate_name("queue", options.get("queue") or "default"),
            key=names(options["key"]),
            connect=Connect.from_options(options),
            run_id=options.get("run_id") or None,
            args_column=options.get("args_column") or None,
            window=integer("window", options.get("window") or str(DEFAULT_WINDOW), 1),
            timeout=_seconds("timeout", options.get("timeout") or str(DEFAULT_TIMEOUT)),
            events=_boolean("events", options.get("events") or "false"),
            report_path=options.get("report_path") or None,
            receipts=_boolean("receipts", options.get("receipts") or "false"),
            partitions=integer("partitions", options.get("partitions") or "1", 1),
        )

    def make_app(self) -> App:
        """An App for connecting; credentials not given fall back to ``JSWORKER_*`` as usual."""
        return self.connect.app(self.app, events=self.events)


def _seconds(option: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise ConfigurationError(f"option {option!r} must be a number of seconds > 0, not {raw!r}")
    return value


def _boolean(option: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ConfigurationError(f"option {option!r} must be true or false, not {raw!r}")
    return value == "true"


async def ensure_streams(app: AppView) -> None:
    """Create the app's streams when its job stream does not exist; an existing one is left as it is."""
    conn = await Connection.open(app.connect_options("producer", "spark"))
    try:
        if not await stream_exists(conn, app.namespace.stream):
            await app.provision_streams(conn)
    finally:
        await conn.close()


@dataclass(frozen=True, slots=True)
class PartitionResult(WriterCommitMessage):
    """What one partition's successful attempt stored: rows sent, new jobs, duplicates, and
    when asked for, each job's id and the stream sequence of its message (a duplicate's:
    the job the server already had)."""

    partition: int
    rows: int
    created: int
    duplicates: int
    receipts: tuple[tuple[str, int], ...] = ()


async def write_partition(
    batches: Iterator[Any], settings: WriteSettings, schema: StructType, partition: int
) -> PartitionResult:
    """Publish the rows of ``batches`` as jobs over a connection of its own."""
    app = settings.make_app()
    conn = await Connection.open(app.connect_options("producer", "spark"))
    try:
        return await publish_rows(conn, app, batches, settings, schema, partition)
    finally:
        await conn.close()


async def publish_rows(
    conn: Connection,
    app: AppView,
    batches: Iterator[Any],
    settings: WriteSettings,
    schema: StructType,
    partition: int,
) -> PartitionResult:
    """Publish the rows of ``batches`` as jobs on ``conn`` and wait for every acknowledgement."""
    encoder = RowEncoder(
        app=settings.app,
        queue=settings.queue,
        task=settings.task,
        columns=schema.fieldNames(),
        key=settings.key,
        converters=plan_columns(schema, settings.key, settings.args_column),
        args_column=settings.args_column,
        run_id=settings.run_id,
        partitions=settings.partitions,
        where=f" of partition {partition}",
    )
    receipts: list[tuple[str, int]] = []
    hooks: list[StoredHook] = []
    if app.options.events:
        hooks.append(_enqueued_events(EventEmitter(conn, app.namespace, app.metrics), settings.queue))
    if settings.receipts:
        hooks.append(_receipts(receipts))
    pipe = AckPipeline(
        conn,
        window=settings.window,
        timeout=settings.timeout,
        stop_on_refusal=True,
        on_stored=_each(hooks) if hooks else None,
    )
    async with pipe:
        rows = 0
        for row in _rows(batches, encoder):
            body, headers = encoder.encode(row, rows)
            await pipe.publish(OutMessage(encoder.subject(headers[MSG_ID]), body, headers))
            rows += 1
        await pipe.wait()
    return PartitionResult(partition, rows, pipe.created, pipe.duplicates, tuple(receipts))


def _rows(batches: Iterator[Any], encoder: RowEncoder) -> Iterator[tuple[Any, ...]]:
    for batch in batches:
        yield from zip(*encoder.convert([column.to_pylist() for column in batch.columns]), strict=True)


def _receipts(into: list[tuple[str, int]]) -> StoredHook:
    async def keep(msg: OutMessage, stored: Stored) -> None:
        # A duplicate's acknowledgement names the message the server already had.
        into.append((msg.headers[MSG_ID], stored.seq))

    return keep


def _each(hooks: list[StoredHook]) -> StoredHook:
    if len(hooks) == 1:
        return hooks[0]

    async def every(msg: OutMessage, stored: Stored) -> None:
        for hook in hooks:
            await hook(msg, stored)

    return every


def _enqueued_events(events: EventEmitter, queue: str) -> StoredHook:
    # Producers emit "enqueued" for every new job; jobs written from Spark are no different.
    async def emit(msg: OutMessage, stored: Stored) -> None:
        if not stored.duplicate:
            await events.enqueued(queue, msg.headers)

    return emit
