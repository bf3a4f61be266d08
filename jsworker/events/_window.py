"""Bounded reads of the job-events stream for a dashboard: how many jobs of each queue started
and were dead-lettered per time bucket (:func:`count_events`), and one job's own events
(:func:`job_events`).

Both read through a throwaway pull consumer (no acks, in memory, filtered by the server,
deleted after the read), never the whole stream:

* **Counts** read the events of the asked kinds stored in a window (by default the last 15
  minutes), headers only: the subject names the queue and the kind, the server's timestamp
  the bucket. Before reading, the consumer says how many events wait for it; when that is
  more than ``limit``, the window is shortened to its most recent part that holds about
  ``limit`` and the counts say so (``cut``). A later call with ``after_seq`` reads only what
  came since.
* **A job's events**: a job's id is not in an event's subject (which names its queue, task and
  kind), so they are found by reading the events of its queue and task from when it was
  enqueued, bodies included, up to ``limit`` events or the end of the stream as the read
  began, stopping early at the event that ended it. A timeline that reached ``limit`` first
  says so (``cut``).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field

from .._errors import EventsNotFound, StreamNotFoundError
from .._wire.names import Namespace
from ..jetstream.connection import Connection
from ..jetstream.history import stream_bounds
from ..jetstream.span import Span
from ._schema import JobEvent, decode_event

#: The window and bucket of the dashboard's charts (seconds).
WINDOW = 900.0
BUCKET = 30.0
#: The most events one count reads (a window holding more is shortened).
COUNT_LIMIT = 100_000
#: The most events one job's timeline reads.
TIMELINE_LIMIT = 5_000
#: Events that end a job, by the state it ended in: its timeline stops at the first one.
ENDING: Mapping[str, str] = {
    "succeeded": "succeeded",
    "failed": "dead_lettered",
    "cancelled": "cancelled",
    "expired": "expired",
}
_ENQUEUES = ("enqueued", "scheduled")
# The server stamps an event when it stores it, a little after the producer stamped the job's
# enqueue (and on another clock): a timeline starts this much before the enqueue it is given.
_CLOCK_MARGIN = 5.0
# A producer publishes a job's ``enqueued`` once the server acknowledged the job, so a fast
# job's ``started`` and even its end can be stored first: a timeline that has not met the
# enqueue reads on this many seconds past the end for it.
_LATE_ENQUEUE = 5.0


@dataclass(frozen=True, slots=True)
class EventCounts:
    """Events of each kind per queue per time bucket, by when the server stored them.

    ``counts[(queue, kind)][n]`` is how many were stored in bucket ``n``, which spans
    ``[n * bucket, (n + 1) * bucket)`` in unix seconds. Buckets from ``since`` (the start of
    the first one counted) to ``until`` (when the read began) are complete; earlier ones were
    not read. ``last_seq`` is the last events-stream sequence the read covered: pass it as
    ``after_seq`` to read only what came after. ``reads`` is how many events the server sent;
    ``cut`` is True when the window held more than the read's limit and was shortened.
    """

    bucket: float
    since: float
    until: float
    last_seq: int
    counts: Mapping[tuple[str, str], Mapping[int, int]] = field(default_factory=dict)
    reads: int = 0
    cut: bool = False

    def merged(self, newer: EventCounts, window: float = WINDOW) -> EventCounts:
        """These counts followed by ``newer`` (read with ``after_seq=self.last_seq``), keeping
        the buckets of the last ``window`` seconds up to ``newer.until``."""
        since = max(self.since, _bucket_start(newer.until - window, self.bucket))
        if newer.cut:
            # What came between the two reads was only partly read: keep the newer alone.
            return newer
        first = math.floor(since / self.bucket)
        counts: dict[tuple[str, str], dict[int, int]] = {}
        for source in (self.counts, newer.counts):
            for key, buckets in source.items():
                mine = counts.setdefault(key, {})
                for n, value in buckets.items():
                    if n >= first:
                        mine[n] = mine.get(n, 0) + value
        return EventCounts(self.bucket, since, newer.until, newer.last_seq, counts, self.reads + newer.reads)

    def queues(self) -> list[str]:
        """The queues with any event counted, by name."""
        return sorted({queue for queue, _ in self.counts})

    def rates(self, queue: str, kind: str, now: float | None = None) -> list[float]:
        """Events per second of ``kind`` in ``queue``, one value a bucket from :attr:`since`
        to ``now`` (default :attr:`until`), the last one of the bucket still filling."""
        now = self.until if now is None else now
        buckets = self.counts.get((queue, kind), {})
        first, last = math.floor(self.since / self.bucket), math.floor(now / self.bucket)
        out = []
        for n in range(first, last + 1):
            span = min(self.bucket, max(1.0, now - n * self.bucket))
            out.append(round(buckets.get(n, 0) / span, 2))
        return out


@dataclass(frozen=True, slots=True)
class JobTimeline:
    """The events of one job found in the events stream, by their own times (``ts``).

    Read from the events on ``subject`` stored at or after ``since`` (unix seconds): ``reads``
    events were read to find them. ``cut`` is True when the read stopped at its limit before
    the end of the stream (or before the event that ended the job): later events of the job
    may exist but were not looked for.
    """

    job_id: str
    events: tuple[JobEvent, ...]
    subject: str
    since: float
    reads: int
    cut: bool


def _bucket_start(moment: float, bucket: float) -> float:
    return math.floor(moment / bucket) * bucket


async def count_events(
    conn: Connection,
    ns: Namespace,
    kinds: Iterable[str],
    *,
    window: float = WINDOW,
    bucket: float = BUCKET,
    after_seq: int | None = None,
    limit: int = COUNT_LIMIT,
) -> EventCounts:
    """How many events of ``kinds`` each queue had per ``bucket`` seconds over the last
    ``window`` seconds (after sequence ``after_seq`` only, when given); see the module.

    :class:`EventsNotFound` when the app has no events stream.
    """
    now = time.time()
    since = _bucket_start(now - window, bucket)
    bounds = await stream_bounds(conn, ns.events_stream)
    if bounds is None:
        raise _missing(ns)
    empty = EventCounts(bucket, since, now, max(bounds.last_seq, after_seq or 0))
    if bounds.messages == 0 or (after_seq is not None and bounds.last_seq <= after_seq):
        return empty
    filters = [ns.event_subject("*", "*", kind) for kind in kinds]
    counts: dict[tuple[str, str], dict[int, int]] = defaultdict(dict)
    reads, cut = 0, False
    start_seq = None if after_seq is None else after_seq + 1
    current = _bucket_start(now, bucket)
    while True:
        start_time = None if start_seq is not None else since
        async with _span(
            conn, ns, filters, start_seq=start_seq, start_time=start_time, headers_only=True
        ) as span:
            if span.pending > limit and since < current:
                cut = True
                if start_seq is not None:
                    # Too much since the last read to catch up on: a fresh window instead.
                    start_seq = None
                    continue
                # The newest part of the window that holds about ``limit`` of them (at the
                # window's average rate), whole buckets only; at worst the current bucket.
                share = (now - since) * limit / span.pending
                since = min(current, max(since + bucket, _bucket_start(now - share, bucket) + bucket))
                continue
            async for msg in span.messages(bounds.last_seq):
                reads += 1
                parts = msg.subject.split(".")
                if len(parts) != 6 or msg.stored_at is None:
                    continue
                n = math.floor(msg.stored_at / bucket)
                key = (parts[3], parts[5])
                counts[key][n] = counts[key].get(n, 0) + 1
            break
    return EventCounts(bucket, since, now, bounds.last_seq, dict(counts), reads, cut)


async def job_events(
    conn: Connection,
    ns: Namespace,
    job_id: str,
    *,
    queue: str | None,
    task: str | None,
    since: float,
    ended: str | None = None,
    limit: int = TIMELINE_LIMIT,
) -> JobTimeline:
    """The events of job ``job_id`` stored from ``since`` (unix seconds, the job's enqueue)
    on, among those of ``queue`` and ``task`` when known (else of the whole app); stops at
    the event that ``ended`` (the job's final state, see :data:`ENDING`) says ended it, or
    after ``limit`` events read (see the module).

    :class:`EventsNotFound` when the app has no events stream.
    """
    bounds = await stream_bounds(conn, ns.events_stream)
    if bounds is None:
        raise _missing(ns)
    subject = ns.event_subject(queue, task, "*") if queue and task else ns.events_subjects
    start = since - _CLOCK_MARGIN
    found: list[JobEvent] = []
    reads, cut = 0, False
    # Once the job's end was read: until when to read on for an enqueue stored after it.
    late_until: float | None = None
    if bounds.messages:
        async with _span(conn, ns, [subject], start_time=start) as span:
            async for msg in span.messages(bounds.last_seq):
                if reads >= limit:
                    cut = True
                    break
                if late_until is not None and (msg.stored_at or 0.0) > late_until:
                    break
                reads += 1
                event = decode_event(msg.body or b"")
                if event is None or event.job_id != job_id:
                    continue
                found.append(event)
                enqueued = any(e.event in _ENQUEUES for e in found)
                if late_until is not None and enqueued:
                    break
                if ended is not None and event.event == ENDING.get(ended):
                    if enqueued:
                        break
                    late_until = (msg.stored_at or time.time()) + _LATE_ENQUEUE
    # In the order they happened: the stream's may differ (a producer's ``enqueued`` can be
    # stored after the worker's ``started``, each publishing on its own).
    found.sort(key=lambda e: e.ts)
    return JobTimeline(job_id, tuple(found), subject, start, reads, cut)


async def job_timeline(
    conn: Connection,
    ns: Namespace,
    job_id: str,
    *,
    queue: str | None,
    task: str | None,
    enqueued_at: float | None,
    anchor: float,
    ended: str | None = None,
    limit: int = TIMELINE_LIMIT,
) -> JobTimeline:
    """The events of job ``job_id`` (:func:`job_events`) from its enqueue when ``enqueued_at``
    is known (a job the server still holds says so in its headers). Otherwise from ``anchor``
    (when its last run started, or when it ended); and when the events found there say it was
    enqueued earlier (a ``started`` event carries its ``enqueued_at``), once more from then,
    so that earlier attempts and its enqueue are shown too (at most twice ``limit`` reads)."""
    if enqueued_at is not None:
        return await job_events(
            conn, ns, job_id, queue=queue, task=task, since=enqueued_at, ended=ended, limit=limit
        )
    first = await job_events(conn, ns, job_id, queue=queue, task=task, since=anchor, ended=ended, limit=limit)
    told = [e.enqueued_at for e in first.events if isinstance(e.enqueued_at, int | float)]
    if not told or min(told) >= first.since or any(e.event in _ENQUEUES for e in first.events):
        return first
    again = await job_events(
        conn, ns, job_id, queue=queue, task=task, since=min(told), ended=ended, limit=limit
    )
    # Both reads may hold the same events (the second one ran on past the first's start).
    unique = {(e.event, e.attempt, e.ts): e for e in (*again.events, *first.events)}
    events = tuple(sorted(unique.values(), key=lambda e: e.ts))
    return JobTimeline(
        job_id, events, first.subject, again.since, first.reads + again.reads, again.cut or first.cut
    )


def _missing(ns: Namespace) -> EventsNotFound:
    return EventsNotFound(f"no events stream {ns.events_stream}: the app never ran with App(events=True)")


@contextlib.asynccontextmanager
async def _span(
    conn: Connection,
    ns: Namespace,
    filters: list[str],
    *,
    start_seq: int | None = None,
    start_time: float | None = None,
    headers_only: bool = False,
) -> AsyncIterator[Span]:
    """A :class:`Span` of the events stream; a stream deleted meanwhile is EventsNotFound."""
    try:
        async with Span(
            conn,
            ns.events_stream,
            filters,
            start_seq=start_seq,
            start_time=start_time,
            headers_only=headers_only,
        ) as span:
            yield span
    except StreamNotFoundError as exc:
        raise _missing(ns) from exc
