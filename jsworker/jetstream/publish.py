"""Publishing jobs with server-side dedup, one at a time or many in flight.

Every message carries ``Nats-Msg-Id``. A publish whose acknowledgement does not arrive is
retried with the very same id, so the server's dedup window turns a retry of a publish that
did get stored into a no-op instead of a second job.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import nats.errors
import nats.js.errors
from nats.js.api import PubAck

from ..errors import EnqueueError
from ..wire import MSG_ID
from .connection import Connection


class NoStreamError(EnqueueError):
    """No stream holds the subject: the app's topology has not been created yet."""


class PayloadTooLargeError(EnqueueError):
    """Body and headers together exceed the server's ``max_payload``; nothing was sent."""


class OutMessage(NamedTuple):
    """A message to store: subject, body and headers (which must include ``Nats-Msg-Id``).

    A named tuple rather than a frozen dataclass: one is built per job, and tuples are built
    several times faster.
    """

    subject: str
    body: bytes
    headers: Mapping[str, str]

    @property
    def size(self) -> int:
        """Bytes the server counts against ``max_payload``: body plus the encoded header block."""
        header_block = len(b"NATS/1.0\r\n\r\n") + sum(
            len(k.encode()) + len(v.encode()) + 4 for k, v in self.headers.items()
        )
        return len(self.body) + header_block


def check_size(msg: OutMessage, max_payload: int) -> None:
    """Raise :class:`PayloadTooLargeError` before sending a message the server would refuse.

    The client checks only the body; an oversized header block gets the connection closed by
    the server for good, so it must never be sent.
    """
    # A character is at most 4 bytes in UTF-8 (plus 4 bytes of ": " and CRLF per header, 14 of
    # framing): a bound without encoding anything, enough for all but messages near the limit.
    bound = len(msg.body) + 14 + sum(4 * (len(k) + len(v)) + 4 for k, v in msg.headers.items())
    if bound > max_payload and msg.size > max_payload:
        raise PayloadTooLargeError(
            f"job {msg.headers.get(MSG_ID)} is {msg.size} bytes with its headers; the server accepts "
            f"at most {max_payload} bytes per message (max_payload)"
        )


class Stored(NamedTuple):
    """What the server said about a stored message."""

    seq: int
    duplicate: bool


def _stored(ack: PubAck) -> Stored:
    return Stored(int(ack.seq), bool(ack.duplicate))


class Publisher:
    """Stores messages in JetStream over one connection.

    A lost acknowledgement, a dropped connection or (with ``retry_no_stream``) a stream without
    a leader is retried with the same ``Nats-Msg-Id`` for up to ``retry_for`` seconds, each
    attempt waiting at most ``timeout``; then :class:`EnqueueError` is raised. That rides out a
    server restart or a cluster leader election without ever storing a job twice.
    """

    def __init__(
        self,
        conn: Connection,
        *,
        timeout: float = 5.0,
        retry_for: float = 15.0,
        window: int = 1000,
        retry_no_stream: bool = False,
    ) -> None:
        self.conn = conn
        self.timeout = timeout
        self.retry_for = retry_for
        self.window = window
        self.retry_no_stream = retry_no_stream

    async def publish(self, msg: OutMessage) -> Stored:
        """Store one message and wait for the server's acknowledgement."""
        check_size(msg, self.conn.max_payload)
        deadline = time.monotonic() + self.retry_for
        last: BaseException | None = None
        attempts = 0
        while True:
            remaining = deadline - time.monotonic()
            if attempts and remaining <= 0:
                break
            attempts += 1
            try:
                ack = await self.conn.js.publish(
                    msg.subject,
                    msg.body,
                    timeout=max(0.001, min(self.timeout, remaining)),
                    headers=_headers(msg),
                )
                return _stored(ack)
            except (TimeoutError, nats.errors.Error, OSError) as exc:
                _raise_final(exc, msg, self.conn.max_payload, self.retry_no_stream)
                last = exc  # retried with the same Nats-Msg-Id: the server drops a second copy
            await asyncio.sleep(min(0.1 * 2**attempts, 1.0, max(0.0, deadline - time.monotonic())))
        raise EnqueueError(
            f"job {msg.headers.get(MSG_ID)} not acknowledged after {attempts} attempts in "
            f"{self.retry_for:g}s ({type(last).__name__}); it may have been stored, and enqueueing it "
            "again with the same job id cannot duplicate it"
        ) from last

    async def publish_many(self, msgs: Sequence[OutMessage]) -> list[Stored]:
        """Store many messages with up to ``window`` acknowledgements outstanding.

        Results come back in the order of ``msgs``. Messages whose acknowledgement went missing
        are published once more one by one (same ids), so the call either stores all of them
        or raises.
        """
        for msg in msgs:
            check_size(msg, self.conn.max_payload)
        results: list[Stored | None] = [None] * len(msgs)
        for start in range(0, len(msgs), self.window):
            chunk = range(start, min(start + self.window, len(msgs)))
            futures: list[asyncio.Future[PubAck] | None] = []
            for i in chunk:
                msg = msgs[i]
                try:
                    fut = await self.conn.js.publish_async(msg.subject, msg.body, headers=_headers(msg))
                except (nats.errors.Error, OSError):
                    fut = None  # retried below, one by one
                futures.append(fut)
            # One wait for the whole chunk (a wait_for per future costs more than the publish).
            # Every outcome is collected before raising, so no exception goes unretrieved.
            sent = [f for f in futures if f is not None]
            if sent:
                await asyncio.wait(sent, timeout=self.timeout)
            failures: list[tuple[int, BaseException]] = []
            for i, fut in zip(chunk, futures, strict=True):
                if fut is None:
                    continue
                if not fut.done():
                    fut.cancel()  # no acknowledgement in time: published once more below
                    failures.append((i, TimeoutError()))
                elif (exc := fut.exception()) is not None:
                    failures.append((i, exc))
                else:
                    results[i] = _stored(fut.result())
            for i, failure in failures:
                _raise_final(failure, msgs[i], self.conn.max_payload, self.retry_no_stream)
        for i, result in enumerate(results):
            if result is None:
                results[i] = await self.publish(msgs[i])
        return [r for r in results if r is not None]


def _headers(msg: OutMessage) -> dict[str, str]:
    # The client takes a dict and does not change it: no copy when it already is one.
    headers = msg.headers
    return headers if isinstance(headers, dict) else dict(headers)


def _raise_final(exc: BaseException, msg: OutMessage, max_payload: int, retry_no_stream: bool) -> None:
    """Raise the jsworker error for failures a retry cannot fix; return for those it can."""
    job = msg.headers.get(MSG_ID)
    if isinstance(exc, nats.js.errors.NoStreamResponseError | nats.errors.NoRespondersError):
        if retry_no_stream:
            return  # the stream exists: its leader is being elected, or the server is restarting
        raise NoStreamError(f"no stream accepts subject {msg.subject}") from exc
    if isinstance(exc, nats.js.errors.APIError):
        raise EnqueueError(f"server rejected job {job}: {exc.description}") from exc
    if isinstance(exc, nats.errors.MaxPayloadError):
        raise EnqueueError(
            f"job {job} is {len(msg.body)} bytes, over the server's max_payload of {max_payload} bytes"
        ) from exc
