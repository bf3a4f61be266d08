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

from .api import ApiError, StreamRequestError, api_subject, failures_as, request_json
from .connection import Connection

# Without a message for this long, ask the server whether anything is left to deliver.
_IDLE = 0.5
# A read that makes no progress for this long has lost its server: give up, saying so.
_STALLED = 30.0


class HistoryError(StreamRequestError):
    """Reading a stream's history failed (see ``transient``)."""


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
    config = ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
    if start_seq is not None:
        config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start_seq)
    elif start_time is not None:
        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=datetime.fromtimestamp(start_time, UTC)
        )
    batches: asyncio.Queue[list[HistoryMessage] | None] = asyncio.Queue(maxsize=2)
    state = _ReadState()

    async def deliver(msg: Msg) -> None:
        if state.done:
            return
        meta = msg.metadata
        seq = int(meta.sequence.stream)
        stored_at = meta.timestamp.timestamp()
        state.last_activity = time.monotonic()
        if start_time is not None and stored_at < start_time:
            return  # only when the server could not seek that far ahead (past year 2262)
        if seq > stop_seq or (stop_time is not None and stored_at > stop_time):
            await state.finish(batches)
            return
        state.buffer.append(HistoryMessage(seq, msg.data, stored_at))
        if seq >= stop_seq or meta.num_pending == 0:
            await state.finish(batches)
        elif len(state.buffer) >= batch:
            full, state.buffer = state.buffer, []
            await batches.put(full)

    with _errors(f"cannot read {stream}"):
        try:
            sub = await conn.js.subscribe(
                subject, stream=stream, cb=deliver, ordered_consumer=True, config=config
            )
        except nats.js.errors.NotFoundError:
            return
    try:
        while True:
            try:
                chunk = await asyncio.wait_for(batches.get(), _IDLE)
            except TimeoutError:
                if await _nothing_left(sub, state):
                    await state.finish(batches)
                continue
            if chunk is None:
                return
            if chunk:
                yield chunk
    finally:
        state.done = True
        with contextlib.suppress(nats.errors.Error, TimeoutError):
            await sub.unsubscribe()


class _ReadState:
    """What the delivery callback and the reading loop of one read share."""

    def __init__(self) -> None:
        self.buffer: list[HistoryMessage] = []
        self.done = False
        self.last_activity = time.monotonic()

    async def finish(self, batches: asyncio.Queue[list[HistoryMessage] | None]) -> None:
        if self.done:
            return
        self.done = True
        rest, self.buffer = self.buffer, []
        await batches.put(rest)
        await batches.put(None)


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
