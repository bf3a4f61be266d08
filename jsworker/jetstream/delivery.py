"""One delivered job message and the ack protocol verbs on it."""

from __future__ import annotations

import time
from collections.abc import Mapping

from nats.aio.client import Client

_ACK = b"+ACK"
_NAK = b"-NAK"
_WPI = b"+WPI"
_TERM = b"+TERM"
_EMPTY: Mapping[str, str] = {}


class Delivery:
    """A job message handed out by the pull loop.

    The verbs are fire-and-forget publishes to the message's reply subject (no round trip);
    only the first of ack / nak / term counts, later ones are ignored, while ``in_progress``
    may be repeated until then.
    """

    __slots__ = (
        "_nc",
        "attempt",
        "body",
        "headers",
        "received_at",
        "reply",
        "settled",
        "stream_seq",
        "subject",
    )

    def __init__(self, nc: Client, subject: str, reply: str, body: bytes, headers: Mapping[str, str] | None):
        self._nc = nc
        self.subject = subject
        self.reply = reply
        self.body = body
        self.headers: Mapping[str, str] = headers or _EMPTY
        self.received_at = time.monotonic()
        self.settled = False
        self.attempt, self.stream_seq = _parse_reply(reply)

    async def ack(self) -> None:
        """The job is done: the server deletes it from the work-queue stream."""
        await self._settle(_ACK)

    async def nak(self, delay: float | None = None) -> None:
        """Give the job back, to be delivered again after ``delay`` seconds (at once if None)."""
        if delay and delay > 0:
            await self._settle(b'-NAK {"delay":%d}' % int(delay * 1e9))
        else:
            await self._settle(_NAK)

    async def term(self, reason: str = "") -> None:
        """Never deliver the job again; the reason shows in the server's termination advisory."""
        reason = reason.replace("\r", " ").replace("\n", " ")[:200]
        await self._settle(_TERM + (b" " + reason.encode() if reason else b""))

    async def in_progress(self) -> None:
        """Reset the server's ack timer: the job is still being worked on."""
        if not self.settled and self.reply:
            await self._nc.publish(self.reply, _WPI)

    async def _settle(self, verb: bytes) -> None:
        if self.settled or not self.reply:
            return
        self.settled = True
        await self._nc.publish(self.reply, verb)


def _parse_reply(reply: str) -> tuple[int, int]:
    """(delivery count, stream sequence) from a ``$JS.ACK`` reply subject.

    The server uses ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>``, or
    a longer form with domain and account hash in front (2.10+ with domains).
    """
    parts = reply.split(".")
    try:
        if len(parts) == 9:
            return int(parts[4]), int(parts[5])
        if len(parts) >= 11:
            return int(parts[6]), int(parts[7])
    except ValueError:
        pass
    return 1, 0
