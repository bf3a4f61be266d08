"""``spark.read.format("jsworker-events")``: an app's job events as a DataFrame.

A Spark 4 Python data source reading ``JSW_<APP>_EVENTS`` straight from the server, with the
columns of the Parquet export (:mod:`jsworker.events._rows`). Planning reads the stream's
sequence range once and cuts it into ``partitions`` ranges; each partition opens its own
connection (never one made elsewhere: connections cannot travel to executors) on an event loop
of its own and reads its range through an ordered consumer, handing Spark Arrow batches as they
arrive. Every query reads the stream again, through Python, at some 25-30k events/s per core:
for repeated analysis export once (``jsworker events export``) or ``.cache()`` the DataFrame.

.. code-block:: python

    spark.dataSource.register(JobEventsDataSource)  # or jsworker.spark.register(spark)
    events = (spark.read.format("jsworker-events").option("app", "shop")
              .option("servers", "nats://127.0.0.1:4222").option("since", "1d").load())
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from .._app import App
from .._errors import ConfigurationError
from .._wire.names import validate_app_name
from ..events._reader import EventsNotFound, read_event_rows, to_unix
from ..events._rows import SPARK_SCHEMA, arrow_schema, rows_to_batch
from ..jetstream.connection import Connection
from ..jetstream.history import seq_at_time, stream_bounds
from ._options import Connect, integer

NAME = "jsworker-events"
"""The format name: ``spark.read.format("jsworker-events")``."""

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
    """The ``jsworker-events`` format: read an app's job events.

    Options: ``app`` (required); ``servers`` (comma separated, else ``JSWORKER_URL``);
    ``user``, ``password``, ``token``, ``credentials`` (or ``creds``), ``nkey_seed``,
    ``tls_ca``, ``tls_cert``, ``tls_key`` (else the ``JSWORKER_*`` variables of the process
    that connects); ``partitions`` (sequence ranges read in parallel, default 4); ``since``
    and ``until`` (an ISO time or a time ago such as ``1d``: events stored in that window;
    ``since`` needs nats-server 2.11+). The read covers the events stored when the query was
    planned; messages that are not job events are left out. The schema is fixed: the
    columns of :data:`~jsworker.events._rows.SPARK_SCHEMA`.
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


class JobEventsReader(DataSourceReader):
    """Plans sequence ranges and reads them; both run in Spark's Python workers, so nothing
    but the settings is shared between them (partitions carry their range)."""

    def __init__(self, settings: ReadSettings) -> None:
        self.settings = settings

    def partitions(self) -> Sequence[InputPartition]:
        """The stream's sequence range now (from ``since``, when given), cut in ranges."""
        ranges = asyncio.run(_plan(self.settings))
        # Spark wants at least one partition, even for nothing to read.
        return ranges or [SeqRange(1, 0)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Arrow record batches of the events in one range."""
        assert isinstance(partition, SeqRange)
        if partition.hi < partition.lo:
            return
        # A loop of its own for the whole partition, closed at the end; batches are handed
        # to Spark as they come, so a partition never holds more than a few in memory.
        with asyncio.Runner() as runner:
            batches = _read_range(self.settings, partition.lo, partition.hi)
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


async def _plan(settings: ReadSettings) -> list[SeqRange]:
    app = settings.make_app()
    conn = await Connection.open(app.connect_options("operator", "spark-events"))
    try:
        stream = app.namespace.events_stream
        bounds = await stream_bounds(conn, stream)
        if bounds is None:
            raise EventsNotFound(f"no events stream {stream}: the app never ran with App(events=True)")
        first = bounds.first_seq
        if settings.since is not None:
            found = await seq_at_time(conn, stream, settings.since)
            if found is None:
                return []
            first = max(first, found)
        return seq_ranges(first, bounds.last_seq, settings.partitions) if bounds.messages else []
    finally:
        await conn.close()


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
