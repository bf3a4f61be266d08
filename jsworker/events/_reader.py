"""Reading an app's job events back from ``JSW_<APP>_EVENTS`` as rows (see :mod:`.rows`).

Times given to the readers (``since``, ``until``) are compared with when the *server stored*
each event, which is what it can seek by; for events published live that is within
milliseconds of the event's own ``ts``.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from datetime import UTC, datetime

from .._errors import EventsNotFound as EventsNotFound
from .._wire.names import Namespace
from ..jetstream.connection import Connection
from ..jetstream.history import read_history, stream_bounds
from ._rows import Row, event_row

#: A point in time: unix seconds, an aware or naive (read as UTC) datetime, or text for
#: :func:`parse_time`.
When = float | int | datetime | str

_RELATIVE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*", re.IGNORECASE)
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_time(text: str, now: float | None = None) -> float:
    """Unix seconds of ``text``: an ISO 8601 time or date (UTC unless it has an offset), ``now``,
    or a time ago: a number and a unit, ``s``, ``m``, ``h``, ``d`` or ``w`` (``90s``, ``30m``,
    ``1.5h``, ``7d``). Raises ValueError for anything else.
    """
    now = now if now is not None else datetime.now(UTC).timestamp()
    if text.strip().lower() == "now":
        return now
    relative = _RELATIVE.fullmatch(text)
    if relative:
        return now - float(relative.group(1)) * _UNIT_SECONDS[relative.group(2).lower()]
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"not a time: {text!r}; give an ISO time (2026-11-22T08:00:00Z), a date, "
            "or a time ago such as 30m, 12h or 7d"
        ) from None
    return to_unix(parsed)


def to_unix(when: When) -> float:
    """Unix seconds of ``when`` (see :data:`When`)."""
    if isinstance(when, str):
        return parse_time(when)
    if isinstance(when, datetime):
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return when.timestamp()
    return float(when)


@dataclass(frozen=True, slots=True)
class EventRows:
    """Rows of the events read in one go, and how many messages were not events.

    ``first_seq``/``last_seq`` span every message read, skipped ones included.
    """

    rows: list[Row]
    skipped: int
    first_seq: int
    last_seq: int


async def read_event_rows(
    conn: Connection,
    namespace: Namespace,
    *,
    since: When | None = None,
    until: When | None = None,
    start_seq: int | None = None,
    stop_seq: int | None = None,
    batch: int = 5000,
) -> AsyncGenerator[EventRows, None]:
    """The app's events in sequence order, in lists of up to ``batch`` rows.

    Starts at ``start_seq``, else at the first event stored at or after ``since``, else at
    the first event kept; ends after ``stop_seq`` (default: the last event stored when the
    read began, so it ends even while events keep arriving) and before the first event stored
    after ``until``. Messages that are not job events are skipped and counted. Raises
    :class:`EventsNotFound` when the app has no events stream.
    """
    stream = namespace.events_stream
    bounds = await stream_bounds(conn, stream)
    if bounds is None:
        raise EventsNotFound(
            f"no events stream {stream} on the server: the app {namespace.app!r} has never run "
            "with App(events=True)"
        )
    last = bounds.last_seq if stop_seq is None else min(stop_seq, bounds.last_seq)
    if bounds.messages == 0 or last < bounds.first_seq:
        return
    messages = read_history(
        conn,
        stream,
        namespace.events_subjects,
        stop_seq=last,
        start_seq=start_seq,
        start_time=None if since is None else to_unix(since),
        stop_time=None if until is None else to_unix(until),
        batch=batch,
    )
    async for chunk in messages:
        rows = [row for m in chunk if (row := event_row(m.seq, m.data)) is not None]
        yield EventRows(rows, len(chunk) - len(rows), chunk[0].seq, chunk[-1].seq)
