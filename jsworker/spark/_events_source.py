"""``spark.read.format("jsworker-events")``: an app's job events as a DataFrame, and
``spark.readStream.format("jsworker-events")``: the same events as a stream.

A Spark 4 Python data source reading ``JSW_<APP>_EVENTS`` straight from the server, with the
columns of the Parquet export (:mod:`jsworker.events._rows`). Planning reads the stream's
sequence range once and cuts it into ``partitions`` ranges; each partition opens its own
connection (never one made elsewhere: connections cannot travel to executors) on an event loop
of its own and reads its range through an ordered consumer, handing Spark Arrow batches as they
arrive. Every query reads the stream again, through Python, at some 25-30k events/s per core:
for repeated analysis export once (``jsworker events export``) or ``.cache()`` the DataFrame.

A streaming query's offsets are stream sequences (``{"seq": N}``: every event up to N was
read), so its checkpoint says where a restarted query goes on; each micro-batch reads its
range of sequences as a batch read does.

.. code-block:: python

    spark.dataSource.register(JobEventsDataSource)  # or jsworker.spark.register(spark)
    events = (spark.read.format("jsworker-events").option("app", "shop")
              .option("servers", "nats://127.0.0.1:4222").option("since", "1d").load())
    live = (spark.readStream.format("jsworker-events").option("app", "shop")
            .option("maxEventsPerTrigger", 50000).load())
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from .._app import App
from .._errors import ConfigurationError, HistoryError
from .._observability.logging import get_logger
from .._wire.names import validate_app_name
from ..events._reader import EventsNotFound, read_event_rows, to_unix
from ..events._rows import SPARK_SCHEMA, arrow_schema, rows_to_batch
from ..jetstream.connection import Connection
from ..jetstream.history import StreamBounds, seq_at_time, stream_bounds
from ._options import Connect, integer

T = TypeVar("T")

log = get_logger("jsworker.spark")

NAME = "jsworker-events"
"""The format name: ``spark.read.format("jsworker-events")`` and ``spark.readStream.format(...)``."""

DEFAULT_PARTITIONS = 4


@dataclass(frozen=True, slots=True)
class ReadSettings:
    """The reader's options, parsed and checked (see :class:`JobEventsDataSource`)."""

    app: str
    connect: Connect = field(default_factory=Connect)
    partitions: int = DEFAULT_PARTITIONS
    since: float | None = None
    until: float | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ReadSettings:
        """Parse Spark's read options; raises :class:`ConfigurationError` naming a bad one."""
        if not options.get("app"):
            raise ConfigurationError("the jsworker-events reader needs the 'app' option")
        partitions = integer("partitions", options.get("partitions") or str(DEFAULT_PARTITIONS), 1)
        return cls(
            app=validate_app_name(options["app"]),
            connect=Connect.from_options(options),
            partitions=partitions,
            since=_time_option(options, "since"),
            until=_time_option(options, "until"),
        )

    def make_app(self) -> App:
        """An App for connecting; credentials not given fall back to ``JSWORKER_*`` as usual."""
        return self.connect.app(self.app)


def _time_option(options: Mapping[str, str], name: str) -> float | None:
    raw = options.get(name)
    if not raw:
        return None
    try:
        return to_unix(raw)
    except ValueError as exc:
        raise ConfigurationError(f"option {name!r}: {exc}") from None


class SeqRange(InputPartition):
    """One partition: the events with sequences ``lo`` to ``hi``, both included."""

    def __init__(self, lo: int, hi: int) -> None:
        super().__init__((lo, hi))
        self.lo = lo
        self.hi = hi


def seq_ranges(first: int, last: int, parts: int) -> list[SeqRange]:
    """``first..last`` cut into at most ``parts`` contiguous ranges of near-equal length."""
    count = last - first + 1
    if count <= 0:
        return []
    parts = min(parts, count)
    size, extra = divmod(count, parts)
    ranges, lo = [], first
    for i in range(parts):
        hi = lo + size + (1 if i < extra else 0) - 1
        ranges.append(SeqRange(lo, hi))
        lo = hi + 1
    return ranges


class JobEventsDataSource(DataSource):
    """The ``jsworker-events`` format: read an app's job events, in one go or as a stream.

    Options: ``app`` (required); ``servers`` (comma separated, else ``JSWORKER_URL``);
    ``user``, ``password``, ``token``, ``credentials`` (or ``creds``), ``nkey_seed``,
    ``tls_ca``, ``tls_cert``, ``tls_key`` (else the ``JSWORKER_*`` variables of the process
    that connects); ``partitions`` (sequence ranges read in parallel, default 4); ``since``
    and ``until`` (an ISO time or a time ago such as ``1d``: events stored in that window;
    ``since`` needs nats-server 2.11+). The read covers the events stored when the query was
    planned; messages that are not job events are left out. The schema is fixed: the
    columns of :data:`~jsworker.events._rows.SPARK_SCHEMA`.

    As a stream: the same options but ``until``, and ``maxEventsPerTrigger``
    (at most that many stream sequences a micro-batch; default: all there are). A new query
    starts at the first event kept, or at the first stored at or after ``since``.
    """

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return NAME

    def schema(self) -> str:
        """The event columns, as a DDL string."""
        return SPARK_SCHEMA

    def reader(self, schema: StructType) -> JobEventsReader:
        """Check the options; the stream is first read when Spark plans the partitions."""
        return JobEventsReader(ReadSettings.from_options(self.options))

    def streamReader(self, schema: StructType) -> JobEventsStreamReader:
        """Check the options; the stream is first read when Spark asks for offsets."""
        if self.options.get("until"):
            raise ConfigurationError("option 'until' is for spark.read only: a streaming query has no end")
        raw = self.options.get("maxEventsPerTrigger")
        return JobEventsStreamReader(
            ReadSettings.from_options(self.options),
            max_events=None if raw is None else integer("maxEventsPerTrigger", str(raw), 1),
        )


class JobEventsReader(DataSourceReader):
    """Plans sequence ranges and reads them; both run in Spark's Python workers, so nothing
    but the settings is shared between them (partitions carry their range)."""

    def __init__(self, settings: ReadSettings) -> None:
        self.settings = settings

    def partitions(self) -> Sequence[InputPartition]:
        """The stream's sequence range now (from ``since``, when given), cut in ranges."""
        ranges = _plan(self.settings)
        # Spark wants at least one partition, even for nothing to read.
        return ranges or [SeqRange(1, 0)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Arrow record batches of the events in one range."""
        return _read_partition(self.settings, partition)


class JobEventsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A streaming query's reader: offsets are ``{"seq": N}``, every sequence of the events
    stream up to N read. Spark keeps this object in one Python process for the query's life
    and asks it for offsets and partitions; partitions are read elsewhere, as a batch read's.

    Nothing is acknowledged or deleted on commit: the stream keeps events for its max age
    whoever read them, so any number of queries can read it, each from its own checkpoint.
    """

    def __init__(self, settings: ReadSettings, *, max_events: int | None = None) -> None:
        self.settings = settings
        self.max_events = max_events
        # Trigger.AvailableNow: the stream's last sequence when the query began, where it ends.
        self.target: int | None = None
        # The stream's last sequence when last asked, for Spark's progress reports.
        self.latest: int | None = None

    def initialOffset(self) -> dict[str, int]:
        """Just before the first event kept, or before the first stored at or after ``since``."""
        return _offset(_ask(self.settings, self._initial_seq))

    async def _initial_seq(self, conn: Connection, stream: str) -> int:
        bounds = await _events_bounds(conn, stream)
        if not bounds.messages:
            return bounds.last_seq
        if self.settings.since is None:
            return bounds.first_seq - 1
        found = await seq_at_time(conn, stream, self.settings.since)
        # Nothing stored since then: the query starts with what comes next.
        return bounds.last_seq if found is None else found - 1

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxEventsPerTrigger`` sequences a micro-batch, when given."""
        return ReadAllAvailable() if self.max_events is None else ReadMaxRows(self.max_events)

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read up to the last event stored now, in batches of the limit."""
        self.target = _ask(self.settings, _events_bounds).last_seq

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:
        """Where the next micro-batch ends: the stream's last sequence, at most ``limit``
        sequences past ``start`` (expired ones not counted), never past the AvailableNow end."""
        begin = _seq(start)
        bounds = _ask(self.settings, _events_bounds)
        self.latest = bounds.last_seq
        if bounds.last_seq < begin:
            raise HistoryError(
                f"the events stream ends at sequence {bounds.last_seq}, before this query's "
                f"offset {begin}: it was deleted and made again; start the query afresh "
                "(a new checkpoint location)"
            )
        end = bounds.last_seq if self.target is None else min(bounds.last_seq, self.target)
        if isinstance(limit, ReadMaxRows):
            end = min(end, max(begin, bounds.first_seq - 1) + limit.max_rows)
        return _offset(max(begin, end))

    def reportLatestOffset(self) -> dict[str, int] | None:
        """The stream's last sequence as last seen: how far behind the query is."""
        return None if self.latest is None else _offset(self.latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[SeqRange]:
        """Sequences after ``start`` up to ``end``, in ``partitions`` ranges; those expired
        unread are left out, with a warning saying how many."""
        first, last = _seq(start) + 1, _seq(end)
        if last < first:
            return []
        kept = _ask(self.settings, _events_bounds).first_seq
        if kept > first:
            log.warning(
                "spark.events_expired_unread",
                app=self.settings.app,
                from_seq=first,
                to_seq=min(kept, last + 1) - 1,
                lost=min(kept, last + 1) - first,
            )
            first = kept
        return seq_ranges(first, last, self.settings.partitions)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Arrow record batches of the events in one range, as a batch read reads them."""
        return _read_partition(self.settings, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the stream keeps events for its max age, read or not."""


def _offset(seq: int) -> dict[str, int]:
    return {"seq": seq}


def _seq(offset: Mapping[str, Any]) -> int:
    return int(offset["seq"])


def _read_partition(settings: ReadSettings, partition: InputPartition) -> Iterator[Any]:
    """Arrow record batches of the events in one :class:`SeqRange`."""
    assert isinstance(partition, SeqRange)
    if partition.hi < partition.lo:
        return
    # A loop of its own for the whole partition, closed at the end; batches are handed
    # to Spark as they come, so a partition never holds more than a few in memory.
    with asyncio.Runner() as runner:
        batches = _read_range(settings, partition.lo, partition.hi)
        try:
            while True:
                try:
                    yield runner.run(_next(batches))
                except StopAsyncIteration:
                    return
        finally:
            runner.run(batches.aclose())


async def _next(batches: AsyncGenerator[Any, None]) -> Any:
    return await anext(batches)


def _ask(settings: ReadSettings, question: Callable[[Connection, str], Awaitable[T]]) -> T:
    """``question`` about the events stream, asked on a connection of its own."""

    async def ask() -> T:
        app = settings.make_app()
        conn = await Connection.open(app.connect_options("operator", "spark-events"))
        try:
            return await question(conn, app.namespace.events_stream)
        finally:
            await conn.close()

    return asyncio.run(ask())


async def _events_bounds(conn: Connection, stream: str) -> StreamBounds:
    bounds = await stream_bounds(conn, stream)
    if bounds is None:
        raise EventsNotFound(f"no events stream {stream}: the app never ran with App(events=True)")
    return bounds


def _plan(settings: ReadSettings) -> list[SeqRange]:
    async def plan(conn: Connection, stream: str) -> list[SeqRange]:
        bounds = await _events_bounds(conn, stream)
        first = bounds.first_seq
        if settings.since is not None:
            found = await seq_at_time(conn, stream, settings.since)
            if found is None:
                return []
            first = max(first, found)
        return seq_ranges(first, bounds.last_seq, settings.partitions) if bounds.messages else []

    return _ask(settings, plan)


async def _read_range(settings: ReadSettings, lo: int, hi: int) -> AsyncGenerator[Any, None]:
    app = settings.make_app()
    schema = arrow_schema()
    conn = await Connection.open(app.connect_options("operator", "spark-events"))
    try:
        async for got in read_event_rows(
            conn, app.namespace, until=settings.until, start_seq=lo, stop_seq=hi
        ):
            if got.rows:
                yield rows_to_batch(got.rows, schema)
    finally:
        await conn.close()
