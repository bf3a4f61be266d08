"""Acknowledged publishes for a hot path: many in flight over one connection, each awaited
on its own.

nats-py's ``request`` (and so its JetStream ``publish``) makes an inbox token, a timer and a
task per message, which cost a worker that stores a record for every job three times what
the job itself did. Here, one wildcard inbox subscription takes every answer straight from
the client's read loop, the messages published in one event-loop turn go to the socket as one
write, and each caller awaits a plain future (:meth:`AckedPublisher.publish`) or is called
back from the read loop (:meth:`AckedPublisher.send`), so a job need not wait for its record.

With ``batched`` (a stream that allows it, nats-server 2.14+), the messages of one write go
as one JetStream fast batch in "gap fail" mode: the server stores each as it comes, answers
the whole write once (plus a flow acknowledgement at its start), and stores nothing after a
message it could not store, so an answer "stored up to N" holds for every message before N.
While a batch waits for its answer, new messages gather for the next one: under load batches
grow to what a round trip lets through, and the server pays its costs per write once per
batch.

What is not answered within ``timeout`` (a lost message, a reconnect, a stream electing a
leader, a batch the server dropped) is published again; after ``patience`` its caller gets
:class:`~jsworker._errors.EnqueueError`. An answer that comes after its write was published
again still counts for what it says was stored: a server slower than ``timeout`` is heard. A
message published again may be stored twice: use this for messages where a second copy
changes nothing (a key's latest value).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Mapping
from typing import Any

import nats.errors

from .._errors import EnqueueError, StalledError
from .api import ApiError, parse_reply
from .client import HeadedMessage
from .connection import Connection
from .denials import Denial
from .message import OutMessage, check_size

# A plain acknowledgement starts so; anything else (an error, a status) is read in full.
_STORED = b'{"stream":'
# A fast batch's reply subject: <inbox>.<batch id>.<flow>.<gap mode>.<batch seq>.<op>.$FI.
_FAST = ".$FI"
_START, _APPEND, _COMMIT, _END = 0, 1, 2, 3
# The most messages between two flow acknowledgements the server may choose; a write's
# batch is answered at its end anyway, so the server is left free to ack rarely.
_FLOW = 500
# Writes are cut into batches of at most this many messages (what one lost batch resends).
_MAX_BATCH = 1000
# Batches sent and not answered, past which new messages wait for the next answer.
_IN_FLIGHT = 1
_FLOW_ACK = b'{"type":"ack"'
_BATCHES_DISABLED = 10205
_UNKNOWN_BATCH = 10208
_TOO_MANY_BATCHES = 10211


#: Told how a message ended, as ``done(arg, None)`` once stored, else ``done(arg, error)``.
Done = Callable[[Any, BaseException | None], object]


class _Pending:
    __slots__ = ("arg", "done", "first_sent", "message")

    def __init__(self, message: OutMessage, done: Done, arg: object, now: float) -> None:
        self.message = message
        self.done: Done | None = done
        self.arg = arg
        self.first_sent = now

    def finish(self, error: BaseException | None) -> None:
        done, self.done = self.done, None
        if done is not None:
            done(self.arg, error)


class _Write:
    """Messages sent under one reply token (one message, or one fast batch), not all
    answered yet; ``items[:done]`` are."""

    __slots__ = ("done", "errors", "items", "sent")

    def __init__(self, items: list[_Pending], now: float) -> None:
        self.items = items
        self.sent = now
        self.done = 0
        self.errors: dict[int, ApiError] = {}


class AckedPublisher:
    """Stores messages in JetStream; :meth:`publish` returns once the server acknowledged."""

    def __init__(
        self, conn: Connection, *, timeout: float = 1.0, patience: float = 5.0, batched: bool = False
    ) -> None:
        self.conn = conn
        self.timeout = timeout
        self.patience = patience
        self.batched = batched
        self._prefix = ""
        # Starts each batch id: the server knows a batch by its id alone, across every
        # publisher of the stream, so ids must differ between publishers, not only here.
        self._batch_tag = ""
        self._sub: Any = None
        self._next = 0
        self._writes: dict[str, _Write] = {}
        # Writes sent again after their timeout whose answer may still come: a server slower
        # than ``timeout`` answers only these, and what it says it stored is stored.
        self._late: dict[str, _Write] = {}
        self._queued: list[_Pending] = []
        self._flush_soon = False
        self._sweeper: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Future[None]] = set()
        self._unlisten: Callable[[], None] | None = None
        self._idle: asyncio.Event | None = None

    async def start(self) -> None:
        """Subscribe to the acknowledgement inbox."""
        inbox = self.conn.nc.new_inbox()
        self._prefix = f"{inbox}."
        self._batch_tag = inbox.rpartition(".")[2]  # the inbox's unique token
        self._unlisten = self.conn.nc.denials.listen(self._on_denied)
        self._sub = await self.conn.nc.subscribe_direct(f"{inbox}.>", self._on_answer)

    async def publish(self, msg: OutMessage) -> None:
        """Store ``msg``; :class:`EnqueueError` when the server refuses it or does not answer
        within ``patience`` seconds."""
        check_size(msg, self.conn.max_payload)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.send(msg, _settle, future)
        await future

    def send(self, msg: OutMessage, done: Done, arg: object) -> None:
        """Store ``msg`` and call ``done(arg, None)`` once it is stored, or ``done(arg,
        error)`` with the error :meth:`publish` would raise; ``done`` runs in the connection's
        read loop and must not raise (``arg`` spares the caller a closure per message). The
        caller vouches for the message's size (see
        :func:`~jsworker.jetstream.message.check_size`): one too large fails its whole write."""
        self._queued.append(_Pending(msg, done, arg, asyncio.get_running_loop().time()))
        if not self._flush_soon:
            self._flush_later()

    @property
    def outstanding(self) -> int:
        """Messages published and not acknowledged yet."""
        return len(self._queued) + sum(len(w.items) - w.done for w in self._writes.values())

    async def close(self) -> None:
        """Stop: what is not answered yet is given up on (its callers are not told), the
        inbox is left. Call :meth:`drain` first to wait for the answers."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        for task in list(self._sending):
            task.cancel()
        if self._sending:
            await asyncio.wait(list(self._sending))
        self._queued.clear()
        self._writes.clear()
        self._late.clear()
        if self._sub is not None:
            with contextlib.suppress(nats.errors.Error):
                await self._sub.unsubscribe()
            self._sub = None

    async def drain(self) -> None:
        """Return once every message sent so far is answered or given up on."""
        while self.outstanding:
            self._idle = asyncio.Event()
            await self._idle.wait()

    def _finished(self, token: str) -> None:
        del self._writes[token]
        if self._queued:
            self._flush_later()
        if self._idle is not None and not self.outstanding:
            self._idle.set()

    def _queue(self, pending: _Pending) -> None:
        self._queued.append(pending)
        self._flush_later()

    def _flush_later(self) -> None:
        if self._flush_soon:
            return
        if self.batched and len(self._writes) >= _IN_FLIGHT and len(self._queued) < _MAX_BATCH:
            # Batches waiting for their answer: what comes meanwhile goes in one batch when
            # one is answered. Under load batches grow to what a round trip lets through,
            # and the server pays its per-write costs once per batch, not per record.
            return
        # Everything published in this turn of the loop goes out in one write.
        self._flush_soon = True
        loop = asyncio.get_running_loop()
        loop.call_soon(self._flush)
        if self._sweeper is None:
            self._sweeper = loop.call_later(self.timeout, self._sweep)

    def _flush(self) -> None:
        self._flush_soon = False
        queued, self._queued = self._queued, []
        if not queued:
            return
        now = asyncio.get_running_loop().time()
        wire: list[HeadedMessage] = []
        if self.batched:
            for start in range(0, len(queued), _MAX_BATCH):
                wire.extend(self._batch(queued[start : start + _MAX_BATCH], now))
        else:
            for pending in queued:
                token = str(self._next)
                self._next += 1
                self._writes[token] = _Write([pending], now)
                msg = pending.message
                wire.append((msg.subject, self._prefix + token, msg.headers, msg.body))
        self._send_soon(wire)

    def _send_soon(self, wire: list[HeadedMessage]) -> None:
        task = asyncio.ensure_future(self._send(wire))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    def _batch(self, items: list[_Pending], now: float) -> list[HeadedMessage]:
        token = f"{self._batch_tag}b{self._next}"
        self._next += 1
        self._writes[token] = _Write(items, now)
        reply = self._batch_reply(token)
        last = len(items)
        wire: list[HeadedMessage] = []
        for seq, pending in enumerate(items, 1):
            # One message alone is a batch started and committed at once: one answer.
            op = _COMMIT if seq == last else _START if seq == 1 else _APPEND
            msg = pending.message
            wire.append((msg.subject, f"{reply}{seq}.{op}{_FAST}", msg.headers, msg.body))
        return wire

    def _batch_reply(self, token: str, seq: int | None = None, op: int = 0) -> str:
        """The reply subject of message ``seq`` of batch ``token`` (without seq: its start)."""
        # "fail": the server stores nothing after a message it did not store, so a count
        # answered holds for every message before it.
        head = f"{self._prefix}{token}.{_FLOW}.fail."
        return head if seq is None else f"{head}{seq}.{op}{_FAST}"

    async def _send(self, wire: list[HeadedMessage]) -> None:
        # What cannot be written now (closed, reconnecting with a full buffer) is published
        # again by the sweep.
        with contextlib.suppress(nats.errors.Error, OSError):
            await self.conn.nc.publish_headed_many(wire)

    def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._sweeper = None
        for token, write in list(self._late.items()):
            if now - write.sent >= self.patience or all(p.done is None for p in write.items):
                del self._late[token]
        for token, write in list(self._writes.items()):
            if now - write.sent >= self.timeout:
                self._again(write.items[write.done :], now)
                self._finished(token)
                self._late[token] = write
        if self._writes or self._queued or self._late:
            self._sweeper = loop.call_later(self.timeout / 2, self._sweep)

    def _again(self, items: list[_Pending], now: float) -> None:
        """Publish ``items`` again, but end the wait of those past ``patience``."""
        for pending in items:
            if pending.done is None:
                continue
            if now - pending.first_sent >= self.patience:
                pending.finish(
                    StalledError(
                        f"no acknowledgement for {pending.message.subject} within {self.patience:g}s; "
                        "it may have been stored"
                    ),
                )
            else:
                self._queue(pending)

    def _on_answer(self, subject: str, reply: str, data: bytes, headers: Mapping[str, str] | None) -> None:
        # A plain call from the read loop: nothing here waits (see subscribe_direct).
        token, _, rest = subject[len(self._prefix) :].partition(".")
        write = self._writes.get(token)
        if write is None:
            late = self._late.get(token)
            if late is not None:
                self._on_late(token, late, rest, data)
            return  # else answered before, or not ours
        if not rest:
            self._on_single(token, write, data, headers)
        elif rest.endswith(_FAST):
            self._on_batch(token, write, int(rest.split(".")[2]), data, headers)

    def _on_late(self, token: str, write: _Write, rest: str, data: bytes) -> None:
        """An answer to a write sent again since: what it says was stored is stored (a slow
        server would otherwise never be heard, every answer coming after its write's timeout);
        anything else is the newer write's to tell."""
        if data.startswith(_FLOW_ACK):
            self._stored(write, json.loads(data)["seq"])
        elif data.startswith(_STORED) and b'"error"' not in data:
            self._stored(write, json.loads(data).get("count", 0) if rest else 1)
            del self._late[token]

    def _on_single(self, token: str, write: _Write, data: bytes, headers: Mapping[str, str] | None) -> None:
        error: EnqueueError | None = None
        if not data.startswith(_STORED) or b'"error"' in data:
            try:
                parse_reply(data, headers)
            except ApiError as exc:
                if exc.failure.transient:
                    return  # no responders, no leader yet: the sweep publishes it again
                error = self._refused(write.items[0], exc)
        self._finished(token)
        write.items[0].finish(error)

    def _on_batch(
        self, token: str, write: _Write, seq: int, data: bytes, headers: Mapping[str, str] | None
    ) -> None:
        if data.startswith(_FLOW_ACK):
            # In gap-fail mode a flow acknowledgement means: stored up to and including seq.
            self._stored(write, json.loads(data)["seq"])
            return
        if data.startswith(_STORED) and b'"error"' not in data:
            # The batch's end: "count" messages stored.
            self._end(token, write, json.loads(data).get("count", 0))
            return
        try:
            parse_reply(data, headers)
            return  # a gap report: the batch's end follows
        except ApiError as exc:
            error = exc
        code = error.failure.err_code
        if code == _BATCHES_DISABLED:
            self.batched = False  # the stream was changed under us: one message a write
            self._end(token, write, 0)
        elif error.failure.transient or code in (_UNKNOWN_BATCH, _TOO_MANY_BATCHES):
            return  # the sweep publishes what is not stored again
        elif seq == 1:
            # The server drops a batch whose first message it refuses.
            write.errors[1] = error
            self._end(token, write, 0)
        else:
            # The server ends the batch before this message (answering with the count stored)
            # when the next one comes; the last has no next: ask for the end.
            write.errors[seq] = error
            if seq == len(write.items):
                end: HeadedMessage = (
                    write.items[-1].message.subject,
                    self._batch_reply(token, seq, _END),
                    {},
                    b"",
                )
                self._send_soon([end])

    def _end(self, token: str, write: _Write, count: int) -> None:
        """A batch is over with ``count`` messages stored: fail the message the server
        refused next, publish the rest again."""
        self._stored(write, count)
        self._finished(token)
        rest = write.items[write.done :]
        refused = write.errors.get(write.done + 1)
        if rest and refused is not None:
            rest[0].finish(self._refused(rest[0], refused))
            rest = rest[1:]
        self._again(rest, asyncio.get_running_loop().time())

    def _stored(self, write: _Write, upto: int) -> None:
        upto = min(upto, len(write.items))
        for pending in write.items[write.done : upto]:
            pending.finish(None)
        write.done = max(write.done, upto)

    def _refused(self, pending: _Pending, exc: ApiError) -> EnqueueError:
        return EnqueueError(f"the server refused {pending.message.subject}: {exc.failure.text}")

    def _on_denied(self, denial: Denial) -> None:
        # A refused inbox or subject is never answered: say why now, not after `patience`.
        inbox = denial.refuses(self._prefix + ">")
        for token, write in list(self._writes.items()):
            for pending in write.items[write.done :]:
                if inbox or denial.refuses(pending.message.subject):
                    pending.finish(denial.error(pending.message.subject))
            if all(p.done is None for p in write.items):
                self._finished(token)


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
