"""Reading part of a stream a page at a time, oldest or newest first, holding one page at most.

Two ways in, because the two kinds of stream allow different ones:

* :class:`SubjectReader` asks ``STREAM.MSG.GET`` with ``next_by_subj`` for one message at a
  time: the first on a subject filter at or after a sequence, found through the server's
  subject index. It is the only read of a work-queue stream (the job stream) that takes
  nothing from anyone: the server refuses a second consumer whose filter overlaps a queue's.
  One request a message, the body included (the API has no headers-only form).
* :func:`read_range` reads a Limits stream (the dead letters) through a short-lived consumer
  starting at a sequence, headers only: three requests and the messages' headers for a page.

The server has no "previous message on a subject": :func:`newest_first` reads backwards in
windows of sequences, each read forward, starting right below the cursor and doubling while
they hold fewer messages than the page still needs. A window keeps only its newest messages
that the page can use, so memory stays one page (one a part while its parts are read at once)
whatever a window holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

import nats.errors
import nats.js.errors
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from .api import ApiError, api_subject, failures_as, request_json
from .connection import Connection
from .limits_stream import LimitsStream, LimitsStreamError, StoredMessage
from .limits_stream import _stored as stored_message  # scan's reading of a consumer's message

_FETCH_WAIT = 5.0
# Parts of a window a SubjectReader reads at once (see SubjectReader.window).
_PARTS = 8
# A throwaway consumer outlives a crashed reader only this long (seconds).
_INACTIVE = 60.0
_BATCH = 1000

#: The newest ``keep`` messages with ``start <= seq < end``, oldest first.
WindowReader = Callable[[int, int, int], Awaitable[list[StoredMessage]]]


class Reads:
    """How many messages the server sent for one page (requests that found nothing count
    too): what a page cost it, for the caller to show or test."""

    def __init__(self) -> None:
        self.count = 0


class SubjectReader:
    """The messages on ``subjects`` (wildcards allowed) of ``stream``, read one request each;
    with ``accept``, only those it accepts (the others are read and passed over). Bodies are
    let go as soon as they arrive unless ``bodies``: a page then holds headers only."""

    def __init__(
        self,
        stream: LimitsStream,
        subjects: str,
        reads: Reads,
        accept: Callable[[StoredMessage], bool] | None = None,
        *,
        bodies: bool = False,
    ) -> None:
        self.stream = stream
        self.subjects = subjects
        self.reads = reads
        self.accept = accept
        self.bodies = bodies

    async def first_from(self, seq: int) -> StoredMessage | None:
        """The first message at or after ``seq``, or None."""
        self.reads.count += 1
        msg = await self.stream.next(self.subjects, seq)
        return msg if msg is None or self.bodies else dataclasses.replace(msg, body=None)

    async def forward(self, after: int, ceiling: int | None = None) -> AsyncGenerator[StoredMessage, None]:
        """Messages after sequence ``after`` (up to ``ceiling`` when given), oldest first,
        one request each as the caller takes them."""
        seq = after + 1
        while ceiling is None or seq <= ceiling:
            msg = await self.first_from(seq)
            if msg is None or (ceiling is not None and msg.seq > ceiling):
                return
            if self.accept is None or self.accept(msg):
                yield msg
            seq = msg.seq + 1

    async def window(self, start: int, end: int, keep: int) -> list[StoredMessage]:
        """A :data:`WindowReader`: every message of the window is read, its newest ``keep`` kept.

        The window is read in :data:`_PARTS` parts at once, each forward: one request a message
        one after the other took a round trip each (2,000 of them for a search's 2,000 newest
        jobs, a second at a million waiting jobs)."""
        span = end - start
        if span < 2 * _PARTS:
            return await self._part(start, end, keep)
        step = -(-span // _PARTS)
        parts = await asyncio.gather(
            *(self._part(s, min(s + step, end), keep) for s in range(start, end, step))
        )
        kept: deque[StoredMessage] = deque(maxlen=keep)
        for part in parts:
            kept.extend(part)
        return list(kept)

    async def _part(self, start: int, end: int, keep: int) -> list[StoredMessage]:
        """The newest ``keep`` messages with ``start <= seq < end``, read forward."""
        kept: deque[StoredMessage] = deque(maxlen=keep)
        seq = start
        while seq < end:
            msg = await self.first_from(seq)
            if msg is None or msg.seq >= end:
                break
            if self.accept is None or self.accept(msg):
                kept.append(msg)
            seq = msg.seq + 1
        return list(kept)

    def backward(self, before: int, floor: int, want: int) -> AsyncGenerator[StoredMessage, None]:
        """Messages below sequence ``before`` and at or above ``floor``, newest first; the
        caller takes at most ``want`` of them."""
        return newest_first(self.window, before, floor, want)


async def newest_first(
    read: WindowReader, before: int, floor: int, want: int
) -> AsyncGenerator[StoredMessage, None]:
    """Messages with ``floor <= seq < before``, newest first, of which the caller takes at most
    ``want``, through windows read by ``read`` (see the module)."""
    end, span = before, max(1, want)
    while end > floor and want > 0:
        start = max(floor, end - span)
        found = await read(start, end, want)
        if len(found) < want:
            span *= 2  # sparse here: look further back at once
        for msg in reversed(found):
            yield msg
            want -= 1
        end = start


async def merged(
    sources: Sequence[AsyncIterator[StoredMessage]], newest: bool
) -> AsyncGenerator[StoredMessage, None]:
    """The messages of ``sources`` (each in sequence order, newest first when ``newest``) in
    one such order; a source is read only as far as the caller takes messages."""
    heads = {i: head for i, source in enumerate(sources) if (head := await anext(source, None)) is not None}
    while heads:
        pick = (max if newest else min)(heads, key=lambda i: heads[i].seq)
        yield heads[pick]
        following = await anext(sources[pick], None)
        if following is None:
            del heads[pick]
        else:
            heads[pick] = following


async def take(
    sources: Sequence[AsyncGenerator[StoredMessage, None]], newest: bool, count: int
) -> list[StoredMessage]:
    """The first ``count`` messages of ``sources`` :func:`merged`; every source is closed
    after, so none is left reading."""
    out: list[StoredMessage] = []
    try:
        async with contextlib.aclosing(merged(sources, newest)) as messages:
            async for msg in messages:
                out.append(msg)
                if len(out) >= count:
                    break
    finally:
        for source in sources:
            await source.aclose()
    return out


@dataclass(frozen=True, slots=True)
class Range:
    """What :func:`read_range` read: ``messages`` oldest first, ``reads`` messages sent by the
    server, and ``more``: whether messages past the last one wait on the subject."""

    messages: list[StoredMessage]
    reads: int
    more: bool


async def read_range(
    conn: Connection,
    stream: str,
    subject: str,
    start: int,
    *,
    first: int | None = None,
    end: int | None = None,
    keep: int | None = None,
    bodies: bool = False,
) -> Range:
    """Messages on ``subject`` from sequence ``start``, through a consumer of their own
    (headers only unless ``bodies``): the ``first`` ones, or those below ``end`` of which the
    newest ``keep`` are kept. A stream that does not exist reads as empty."""
    config = ConsumerConfig(
        ack_policy=AckPolicy.NONE,
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=max(1, start),
        filter_subject=subject,
        headers_only=None if bodies else True,
        mem_storage=True,
        num_replicas=1,
        inactive_threshold=_INACTIVE,
    )
    what = f"cannot read {stream}"
    with failures_as(what, LimitsStreamError):
        try:
            info = await conn.js.add_consumer(stream, config)
        except nats.js.errors.NotFoundError:
            return Range([], 0, False)
    name = str(info.name)
    kept: deque[StoredMessage] = deque(maxlen=keep)
    reads, pending = 0, int(info.num_pending or 0)
    try:
        if not pending:
            return Range([], 0, False)
        with failures_as(what, LimitsStreamError):
            sub = await conn.js.pull_subscribe_bind(name, stream)
        try:
            while pending and (first is None or len(kept) < first):
                batch = min(_BATCH, pending, _BATCH if first is None else first - len(kept))
                with failures_as(what, LimitsStreamError):
                    try:
                        msgs = await sub.fetch(batch, timeout=_FETCH_WAIT)
                    except nats.errors.TimeoutError:
                        return Range(list(kept), reads, False)  # counted ones were removed since
                for msg in msgs:
                    reads += 1
                    meta = msg.metadata
                    pending = int(meta.num_pending)
                    if end is not None and meta.sequence.stream >= end:
                        return Range(list(kept), reads, True)
                    kept.append(stored_message(msg, bodies))
            return Range(list(kept), reads, pending > 0)
        finally:
            with contextlib.suppress(nats.errors.Error, TimeoutError):
                await sub.unsubscribe()
    finally:
        with contextlib.suppress(nats.errors.Error, TimeoutError):
            await conn.js.delete_consumer(stream, name)


@dataclass(frozen=True, slots=True)
class RangePage:
    """One page of a Limits stream's messages on a subject: ``messages`` in the order asked
    for, ``last``: the last one's sequence when the listing goes on (None when it ended), and
    ``reads``: what it cost the server."""

    messages: list[StoredMessage]
    last: int | None
    reads: int


async def range_page(
    conn: Connection,
    stream: str,
    subject: str,
    cursor: int,
    limit: int,
    *,
    newest: bool,
    bodies: bool = False,
) -> RangePage:
    """The ``limit`` messages on ``subject`` after sequence ``cursor`` (0: from the start), or
    newest first those below it (0: from the newest), through :func:`read_range`: oldest first
    one consumer from the cursor, newest first windows below it (see the module)."""
    if not newest:
        found = await read_range(conn, stream, subject, cursor + 1, first=limit, bodies=bodies)
        last = found.messages[-1].seq if found.more and found.messages else None
        return RangePage(found.messages, last, found.reads)
    reads = 0

    async def window(start: int, end: int, keep: int) -> list[StoredMessage]:
        nonlocal reads
        found = await read_range(conn, stream, subject, start, end=end, keep=keep, bodies=bodies)
        reads += found.reads
        return found.messages

    before = cursor or await LimitsStream(conn, stream).last_seq() + 1
    out: list[StoredMessage] = []
    async with contextlib.aclosing(newest_first(window, before, 1, limit)) as messages:
        async for msg in messages:
            out.append(msg)
            if len(out) == limit:
                break
    last = out[-1].seq if len(out) == limit and out[-1].seq > 1 else None
    return RangePage(out, last, reads)


async def subject_pages(conn: Connection, stream: str, subjects: str) -> AsyncGenerator[dict[str, int], None]:
    """The subjects of ``stream`` matching ``subjects`` with their message counts, one server
    answer at a time (``STREAM.INFO`` pages them, 100,000 a page by default); nothing for a
    stream that does not exist."""
    offset = 0
    while True:
        with failures_as(f"cannot read {stream}", LimitsStreamError):
            try:
                body = await request_json(
                    conn, api_subject("STREAM.INFO", stream), {"subjects_filter": subjects, "offset": offset}
                )
            except ApiError as exc:
                if exc.failure.not_found:
                    return
                raise
        page = (body.get("state") or {}).get("subjects") or {}
        if not page:
            return
        yield {str(k): int(v) for k, v in page.items()}
        offset += len(page)
        if offset >= int(body.get("total") or 0):
            return
