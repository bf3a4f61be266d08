"""One delivered job message, the ack protocol verbs on it, and how they are sent."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Protocol

import nats.errors

from .client import ACK, NAK, TERM, WPI, JetStreamClient

_EMPTY: Mapping[str, str] = {}


class _Publishes(Protocol):
    async def publish(self, subject: str, payload: bytes) -> None: ...

    def put(self, subject: str, payload: bytes) -> None: ...


class VerbBatcher:
    """Sends ack protocol verbs in batches instead of one socket write each.

    The client writes to the socket once per event-loop turn in which anything was published,
    and a busy worker settles jobs in many separate turns: a write per ack was a fifth of a
    no-op job's cost. Verbs wait here up to ``delay`` seconds (or until ``max_batch`` are
    queued) and then go out together in one write. The delay is far below any ``ack_wait``;
    a worker killed within it has its jobs redelivered, as at-least-once allows anyway.
    """

    def __init__(self, client: JetStreamClient, *, delay: float = 0.001, max_batch: int = 256) -> None:
        self._client = client
        self._delay = delay
        self._max_batch = max_batch
        self._queued: list[tuple[str, bytes]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[None]] = set()

    async def publish(self, subject: str, payload: bytes) -> None:
        """Queue one verb for ``subject`` (a message's reply subject)."""
        self.put(subject, payload)

    def put(self, subject: str, payload: bytes) -> None:
        """:meth:`publish` for callers outside a coroutine."""
        self._queued.append((subject, payload))
        if len(self._queued) >= self._max_batch:
            self._send_now()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._delay, self._send_now)

    async def flush(self) -> None:
        """Send everything queued and wait until it is in the client's buffer."""
        self._send_now()
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)

    def _send_now(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._queued:
            return
        batch, self._queued = self._queued, []
        task = asyncio.ensure_future(self._send(batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[tuple[str, bytes]]) -> None:
        # Verbs that cannot be sent (connection closed) change nothing the server does not
        # already handle: their jobs are redelivered after ack_wait.
        with contextlib.suppress(nats.errors.Error, OSError):
            await self._client.publish_many(batch)


class Delivery:
    """A job message handed out by the pull loop.

    The verbs are fire-and-forget publishes to the message's reply subject (no round trip,
    batched by a :class:`VerbBatcher` when the pull loop hands the message out);
    only the first of ack / nak / term counts, later ones are ignored, while ``in_progress``
    may be repeated until then.
    """

    __slots__ = (
        "_verbs",
        "attempt",
        "body",
        "headers",
        "reply",
        "settled",
        "stream_seq",
        "subject",
    )

    def __init__(
        self, verbs: _Publishes, subject: str, reply: str, body: bytes, headers: Mapping[str, str] | None
    ):
        self._verbs = verbs
        self.subject = subject
        self.reply = reply
        self.body = body
        self.headers: Mapping[str, str] = headers or _EMPTY
        self.settled = False
        self.attempt, self.stream_seq = _parse_reply(reply)

    @property
    def stored_at(self) -> float | None:
        """When the server stored the message (unix seconds), from the reply subject; None
        when the reply does not say."""
        return _reply_timestamp(self.reply)

    async def ack(self) -> None:
        """The job is done: the server deletes it from the work-queue stream."""
        await self._settle(ACK)

    def ack_soon(self) -> None:
        """:meth:`ack` for callers outside a coroutine (a callback)."""
        if not self.settled and self.reply:
            self.settled = True
            self._verbs.put(self.reply, ACK)

    async def nak(self, delay: float | None = None) -> None:
        """Give the job back, to be delivered again after ``delay`` seconds (at once if None)."""
        if delay and delay > 0:
            await self._settle(NAK + b' {"delay":%d}' % int(delay * 1e9))
        else:
            await self._settle(NAK)

    async def term(self, reason: str = "") -> None:
        """Never deliver the job again; the reason shows in the server's termination advisory."""
        reason = reason.replace("\r", " ").replace("\n", " ")[:200]
        await self._settle(TERM + (b" " + reason.encode() if reason else b""))

    async def in_progress(self) -> None:
        """Reset the server's ack timer: the job is still being worked on."""
        if not self.settled and self.reply:
            await self._verbs.publish(self.reply, WPI)

    async def _settle(self, verb: bytes) -> None:
        if self.settled or not self.reply:
            return
        self.settled = True
        await self._verbs.publish(self.reply, verb)


def _parse_reply(reply: str) -> tuple[int, int]:
    """(delivery count, stream sequence) from a ``$JS.ACK`` reply subject.

    The server uses ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>``, or
    a longer form with domain and account hash in front (2.10+ with domains).
    """
    # One split, whose length tells the form: this runs for every message.
    parts = reply.split(".")
    tokens = len(parts)
    try:
        if tokens == 9:
            return int(parts[4]), int(parts[5])
        if tokens >= 11:
            return int(parts[6]), int(parts[7])
    except ValueError:
        pass
    return 1, 0


def _reply_timestamp(reply: str) -> float | None:
    """The stored-at token (unix nanoseconds) of either form of ``$JS.ACK`` reply, in seconds."""
    parts = reply.split(".")
    index = 7 if len(parts) == 9 else 9 if len(parts) >= 11 else None
    if index is None or not parts[index].isdigit():
        return None
    return int(parts[index]) / 1e9
