"""Exporting an app's job events to Parquet files (``jsworker events export``).

Files are named ``events-<first seq>-<last seq>.parquet`` after the sequences of the events
they hold, each at most ``rows_per_file`` rows, with the columns of :mod:`.rows`. Memory stays
bounded by one row group, whatever the size of the export. Exporting again from the sequence
after the last file's (``start_seq``) continues where the previous export ended.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._core.view import AppView
from ..jetstream.connection import Connection
from ._reader import When, read_event_rows
from ._rows import Row, arrow_schema, require_pyarrow, rows_to_batch

_ROW_GROUP = 65_536
_PARTIAL = ".events-partial.parquet"


@dataclass(frozen=True, slots=True)
class ExportReport:
    """What an export wrote: events (rows), messages skipped as not events, the files in
    order, the sequence range of the events written, where a later export should start to
    continue this one (``next_seq``, None when nothing was read), and how long it took."""

    events: int = 0
    skipped: int = 0
    files: list[Path] = field(default_factory=list)
    first_seq: int | None = None
    last_seq: int | None = None
    next_seq: int | None = None
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        """Events written per second."""
        return self.events / self.seconds if self.seconds > 0 else 0.0


def export_events(
    app: AppView,
    to: str | os.PathLike[str],
    *,
    since: When | None = None,
    until: When | None = None,
    start_seq: int | None = None,
    rows_per_file: int = 1_000_000,
) -> ExportReport:
    """Write the app's events to Parquet files in the directory ``to`` (created if missing).

    Which events: as :func:`~jsworker.events._reader.read_event_rows` reads them, from
    ``start_seq`` or ``since`` (a time; default the oldest event kept) until ``until`` or the
    last event stored when the export began. Blocking; from async code use
    :func:`aexport_events`.
    """
    return asyncio.run(
        aexport_events(app, to, since=since, until=until, start_seq=start_seq, rows_per_file=rows_per_file)
    )


async def aexport_events(
    app: AppView,
    to: str | os.PathLike[str],
    *,
    since: When | None = None,
    until: When | None = None,
    start_seq: int | None = None,
    rows_per_file: int = 1_000_000,
    conn: Connection | None = None,
) -> ExportReport:
    """:func:`export_events` on the running event loop, over ``conn`` or a connection of its
    own. The Parquet writes run in a thread so the loop keeps receiving meanwhile."""
    if rows_per_file < 1:
        raise ValueError("rows_per_file must be at least 1")
    require_pyarrow("pyarrow.parquet")  # fail before connecting when pyarrow is missing
    started = time.monotonic()
    own = conn is None
    conn = conn or await Connection.open(app.connect_options("operator", "events-export"))
    sink = _ParquetSink(Path(to), rows_per_file)
    next_seq: int | None = None
    try:
        async for got in read_event_rows(conn, app.namespace, since=since, until=until, start_seq=start_seq):
            sink.skipped += got.skipped
            next_seq = got.last_seq + 1
            if got.rows:
                await asyncio.to_thread(sink.add, got.rows)
        await asyncio.to_thread(sink.close)
    finally:
        sink.abandon()
        if own:
            await conn.close()
    return ExportReport(
        events=sink.events,
        skipped=sink.skipped,
        files=sink.files,
        first_seq=sink.first_seq,
        last_seq=sink.last_seq,
        next_seq=next_seq,
        seconds=time.monotonic() - started,
    )


class _ParquetSink:
    """Rows in, files of at most ``rows_per_file`` rows out, one row group at a time."""

    def __init__(self, directory: Path, rows_per_file: int) -> None:
        self.directory = directory
        self.rows_per_file = rows_per_file
        self.row_group = min(_ROW_GROUP, rows_per_file)
        self.schema = arrow_schema()
        self.parquet = require_pyarrow("pyarrow.parquet")
        self.events = 0
        self.skipped = 0
        self.files: list[Path] = []
        self.first_seq: int | None = None
        self.last_seq: int | None = None
        self._pending: list[Row] = []
        self._writer: Any = None
        self._in_file = 0
        self._file_first: int = 0
        self._file_last: int = 0

    def add(self, rows: list[Row]) -> None:
        while rows:
            # Cut where the file or the row group is full, so files end exactly at the limit.
            room = min(self.rows_per_file - self._in_file - len(self._pending), self.row_group)
            take, rows = rows[:room], rows[room:]
            self._pending.extend(take)
            filled = self._in_file + len(self._pending)
            if len(self._pending) >= self.row_group or filled >= self.rows_per_file:
                self._flush()

    def close(self) -> None:
        self._flush()
        self._finish_file()

    def abandon(self) -> None:
        """Drop a file left half-written by a failed export (finished files stay)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            (self.directory / _PARTIAL).unlink(missing_ok=True)

    def _flush(self) -> None:
        if not self._pending:
            return
        rows, self._pending = self._pending, []
        if self._writer is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._writer = self.parquet.ParquetWriter(self.directory / _PARTIAL, self.schema)
            self._file_first = rows[0][0]
        self._writer.write_batch(rows_to_batch(rows, self.schema))
        self._in_file += len(rows)
        self._file_last = rows[-1][0]
        self.events += len(rows)
        self.first_seq = self._file_first if self.first_seq is None else self.first_seq
        self.last_seq = self._file_last
        if self._in_file >= self.rows_per_file:
            self._finish_file()

    def _finish_file(self) -> None:
        if self._writer is None:
            return
        self._writer.close()
        self._writer = None
        path = self.directory / f"events-{self._file_first}-{self._file_last}.parquet"
        os.replace(self.directory / _PARTIAL, path)
        self.files.append(path)
        self._in_file = 0
