"""Reading a Limits-retention stream's history in order: bounds, a sequence by time, a range.

Reads go through an ordered push consumer (no acks, memory storage, flow control, re-created
by the client from the last sequence seen when it misses heartbeats), which in nats-py is
about twice as fast as pull ``fetch``. Nothing here changes the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from datetime import UTC, datetime

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from .._errors import HistoryError as HistoryError
from .api import ApiError, api_subject, failures_as, request_json
from .connection import Connection

# Without a message for this long, ask the server whether anything is left to deliver.
_IDLE = 0.5
# A read that makes no progress for this long has lost its server: give up, saying so.
_STALLED = 30.0


@dataclass(frozen=True, slots=True)
class StreamBounds:
    """First and last sequence of a stream (both 0 when it never held a message)."""

    first_seq: int
    last_seq: int
    messages: int


@dataclass(frozen=True, slots=True)
class HistoryMessage:
    """One stored message: its stream sequence, body and storage time (unix seconds)."""

    seq: int
    data: bytes
    stored_at: float


async def stream_bounds(conn: Connection, stream: str) -> StreamBounds | None:
    """The stream's first and last sequence now, or None when there is no such stream."""
    with _errors(f"cannot read {stream}"):
        try:
            info = await conn.js.stream_info(stream)
        except nats.js.errors.NotFoundError:
            return None
    state = info.state
    return StreamBounds(int(state.first_seq), int(state.last_seq), int(state.messages))


async def seq_at_time(conn: Connection, stream: str, when: float) -> int | None:
    """Sequence of the first message stored at or after ``when`` (unix seconds); None if none.

    Needs nats-server 2.11 or later (``STREAM.MSG.GET`` by start time).
    """
    conn.require_version("reading events from a start time", (2, 11, 0))
    stamp = datetime.fromtimestamp(when, UTC).isoformat().replace("+00:00", "Z")
    with _errors(f"cannot read {stream}"):
        try:
            body = await request_json(conn, api_subject("STREAM.MSG.GET", stream), {"start_time": stamp})
        except ApiError as exc:
            if exc.failure.not_found:
                return None  # no such stream, or nothing stored since then
            raise
    message = body["message"]
    # Times past 2262 overflow the server's nanoseconds and find the first message instead:
    # only an answer stored at or after the time asked for is one.
    if _parse_time(message["time"]) < when:
        return None
    return int(message["seq"])


def _parse_time(text: str) -> float:
    """Unix seconds of the server's RFC 3339 time (nanoseconds cut to what datetime holds)."""
    head, _, fraction = text.rstrip("Z").partition(".")
    seconds = datetime.fromisoformat(head).replace(tzinfo=UTC).timestamp()
    return seconds + (float(f"0.{fraction}") if fraction else 0.0)


async def read_history(
    conn: Connection,
    stream: str,
    subject: str,
    *,
    stop_seq: int,
    start_seq: int | None = None,
    start_time: float | None = None,
    stop_time: float | None = None,
    batch: int = 5000,
) -> AsyncGenerator[list[HistoryMessage], None]:
    """Messages of ``stream`` on ``subject`` (wildcards allowed) in sequence order, in lists of
    up to ``batch``.

    Starts at ``start_seq`` or at the first message stored at or after ``start_time`` (unix
    seconds; neither: the first message), and ends after ``stop_seq``, before the first
    message stored after ``stop_time``, or when nothing is left, whichever comes first, so a
    read of a stream that keeps growing still ends. Sequences missing from the stream (expired
    or deleted) are skipped. The consumer keeps at most two batches waiting while the caller
    works on one: the server's flow control holds back the rest.
    """
    if start_seq is not None and start_seq > stop_seq:
        return
    state = _ReadState(
        start_time=start_time,
        stop_seq=stop_seq,
        stop_time=stop_time,
        batch=batch,
        batches=asyncio.Queue(maxsize=2),
    )
    with _errors(f"cannot read {stream}"):
        try:
            sub = await conn.js.subscribe(
                subject,
                stream=stream,
                cb=state.deliver,
                ordered_consumer=True,
                config=_start_at(start_seq, start_time),
            )
        except nats.js.errors.NotFoundError:
            return
    try:
        while True:
            try:
                chunk = await asyncio.wait_for(state.batches.get(), _IDLE)
            except TimeoutError:
                if await _nothing_left(sub, state):
                    await state.finish()
                continue
            if chunk is None:
                return
            if chunk:
                yield chunk
    finally:
        state.done = True
        with contextlib.suppress(nats.errors.Error, TimeoutError):
            await sub.unsubscribe()


def _start_at(start_seq: int | None, start_time: float | None) -> ConsumerConfig:
    """Where the read's consumer starts: ``start_seq``, else ``start_time``, else the first message."""
    if start_seq is not None:
        return ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start_seq)
    if start_time is not None:
        return ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=datetime.fromtimestamp(start_time, UTC)
        )
    return ConsumerConfig(deliver_policy=DeliverPolicy.ALL)


class _ReadState:
    """What the delivery callback and the reading loop of one read share.

    The callback fills ``batches`` with lists of up to ``batch`` messages, then None once the
    read is over; the loop empties it.
    """

    def __init__(
        self,
        *,
        start_time: float | None,
        stop_seq: int,
        stop_time: float | None,
        batch: int,
        batches: asyncio.Queue[list[HistoryMessage] | None],
    ) -> None:
        self.start_time, self.stop_seq, self.stop_time = start_time, stop_seq, stop_time
        self.batch = batch
        self.batches = batches
        self.buffer: list[HistoryMessage] = []
        self.done = False
        self.last_activity = time.monotonic()

    async def deliver(self, msg: Msg) -> None:
        """The subscription's callback: one message delivered."""
        if self.done:
            return
        meta = msg.metadata
        seq = int(meta.sequence.stream)
        stored_at = meta.timestamp.timestamp()
        self.last_activity = time.monotonic()
        if self.start_time is not None and stored_at < self.start_time:
            return  # only when the server could not seek that far ahead (past year 2262)
        if seq > self.stop_seq or (self.stop_time is not None and stored_at > self.stop_time):
            await self.finish()
            return
        self.buffer.append(HistoryMessage(seq, msg.data, stored_at))
        if seq >= self.stop_seq or meta.num_pending == 0:
            await self.finish()
        elif len(self.buffer) >= self.batch:
            full, self.buffer = self.buffer, []
            await self.batches.put(full)

    async def finish(self) -> None:
        if self.done:
            return
        self.done = True
        rest, self.buffer = self.buffer, []
        await self.batches.put(rest)
        await self.batches.put(None)


async def _nothing_left(sub: JetStreamContext.PushSubscription, state: _ReadState) -> bool:
    """True when the consumer has delivered everything there is and none of it is unread.

    Raises HistoryError when nothing has arrived for so long that the server must be gone.
    """
    quiet = time.monotonic() - state.last_activity
    if quiet > _STALLED:
        raise HistoryError(f"no message and no answer from the server for {quiet:.0f}s", transient=True)
    if quiet < _IDLE or sub.pending_msgs:
        return False
    try:
        info = await sub.consumer_info()
    except (nats.errors.Error, TimeoutError):
        return False  # re-created after missed heartbeats, or the server is away: ask again later
    return not info.num_pending and not sub.pending_msgs


def _errors(what: str) -> contextlib.AbstractContextManager[None]:
    return failures_as(what, HistoryError)
