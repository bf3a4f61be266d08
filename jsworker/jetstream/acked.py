"""Acknowledged publishes for a hot path: many in flight over one connection, each awaited
on its own.

nats-py's ``request`` (and so its JetStream ``publish``) makes an inbox token, a timer and a
task per message, which cost a worker that stores a record for every job three times what
the job itself did. Here, one wildcard inbox subscription takes every acknowledgement
straight from the client's read loop, the messages published in one event-loop turn go to
the socket as one write, and each caller awaits a plain future. A message with no answer
after ``timeout`` is published again (a lost message, a reconnect, a stream electing a
leader); after ``patience`` its caller gets :class:`~jsworker.errors.EnqueueError`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import nats.errors

from ..errors import EnqueueError
from .api import ApiError, parse_reply
from .client import HeadedMessage
from .connection import Connection
from .denials import Denial
from .message import OutMessage, check_size

# A plain acknowledgement starts so; anything else (an error, a status) is read in full.
_STORED = b'{"stream":'


class _Pending:
    __slots__ = ("first_sent", "future", "message", "sent")

    def __init__(self, message: HeadedMessage, future: asyncio.Future[None], now: float) -> None:
        self.message = message
        self.future = future
        self.first_sent = now
        self.sent = now


class AckedPublisher:
    """Stores messages in JetStream; :meth:`publish` returns once the server acknowledged.

    Without a ``Nats-Msg-Id`` a message published again may be stored twice: use it for
    messages where a second copy changes nothing (a key's latest value).
    """

    def __init__(self, conn: Connection, *, timeout: float = 1.0, patience: float = 5.0) -> None:
        self.conn = conn
        self.timeout = timeout
        self.patience = patience
        self._prefix = ""
        self._sub: Any = None
        self._next = 0
        self._pending: dict[str, _Pending] = {}
        self._queued: list[HeadedMessage] = []
        self._flush_soon = False
        self._sweeper: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Future[None]] = set()
        self._unlisten: Callable[[], None] | None = None

    async def start(self) -> None:
        """Subscribe to the acknowledgement inbox."""
        inbox = self.conn.nc.new_inbox()
        self._prefix = f"{inbox}."
        self._unlisten = self.conn.nc.denials.listen(self._on_denied)
        self._sub = await self.conn.nc.subscribe_direct(f"{inbox}.*", self._on_ack)

    async def publish(self, msg: OutMessage) -> None:
        """Store ``msg``; :class:`EnqueueError` when the server refuses it or does not answer
        within ``patience`` seconds."""
        check_size(msg, self.conn.max_payload)
        token = str(self._next)
        self._next += 1
        loop = asyncio.get_running_loop()
        message = (msg.subject, self._prefix + token, msg.headers, msg.body)
        pending = self._pending[token] = _Pending(message, loop.create_future(), loop.time())
        self._queued.append(message)
        if not self._flush_soon:
            # Everything published in this turn of the loop goes out in one write.
            self._flush_soon = True
            loop.call_soon(self._flush)
        if self._sweeper is None:
            self._sweeper = loop.call_later(self.timeout, self._sweep)
        await pending.future

    @property
    def outstanding(self) -> int:
        """Messages published and not acknowledged yet."""
        return len(self._pending)

    def _flush(self) -> None:
        self._flush_soon = False
        batch, self._queued = self._queued, []
        if batch:
            self._send_soon(batch)

    def _send_soon(self, batch: list[HeadedMessage]) -> None:
        task = asyncio.ensure_future(self._send(batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[HeadedMessage]) -> None:
        # What cannot be written now (closed, reconnecting with a full buffer) is published
        # again by the sweep.
        with contextlib.suppress(nats.errors.Error, OSError):
            await self.conn.nc.publish_headed_many(batch)

    def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._sweeper = None
        again: list[HeadedMessage] = []
        for token, pending in list(self._pending.items()):
            if now - pending.sent < self.timeout:
                continue
            if now - pending.first_sent >= self.patience:
                del self._pending[token]
                _settle(
                    pending.future,
                    EnqueueError(
                        f"no acknowledgement for {pending.message[0]} within {self.patience:g}s; "
                        "it may have been stored"
                    ),
                )
            else:
                pending.sent = now
                again.append(pending.message)
        if again:
            self._send_soon(again)
        if self._pending:
            self._sweeper = loop.call_later(self.timeout / 2, self._sweep)

    async def _on_ack(self, subject: str, reply: str, data: bytes, headers: Mapping[str, str] | None) -> None:
        token = subject[len(self._prefix) :]
        pending = self._pending.get(token)
        if pending is None:
            return  # answered before, or not ours
        error: EnqueueError | None = None
        if not data.startswith(_STORED) or b'"error"' in data:
            try:
                parse_reply(data, headers)
            except ApiError as exc:
                if exc.failure.transient:
                    return  # no responders, no leader yet: the sweep publishes it again
                error = EnqueueError(f"the server refused {pending.message[0]}: {exc.failure.text}")
        del self._pending[token]
        _settle(pending.future, error)

    def _on_denied(self, denial: Denial) -> None:
        # A refused inbox or subject is never answered: say why now, not after `patience`.
        for token, pending in list(self._pending.items()):
            subject = pending.message[0]
            if denial.refuses(self._prefix + "*") or denial.refuses(subject):
                del self._pending[token]
                _settle(pending.future, denial.error(subject))


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
