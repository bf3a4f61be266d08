"""Raw access to a stream's messages: read one by sequence or subject, delete one, and (for a
Limits stream such as the dead letters) scan, count and purge them.

Nothing here removes a message by consuming it: reads go through the stream API
(``STREAM.MSG.GET``) or a throwaway ordered-by-sequence pull consumer with no acks, and removal
is an explicit delete or purge, so single-message reads and deletes are safe on the job stream
too (its schedules). A stream that does not exist yet (no worker ever ran) reads as empty.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from .._errors import LimitsStreamError as LimitsStreamError
from .._errors import StreamNotFoundError as StreamNotFoundError
from .api import ApiError, api_subject, failures_as, request_json
from .connection import Connection

#: Added by the server to messages of a headers-only consumer: the size of the body left out.
MSG_SIZE = "Nats-Msg-Size"
_NO_MESSAGE = 10057  # STREAM.MSG.DELETE of a sequence that holds no message
_NO_STREAM = 10059  # the API's "stream not found"
_FETCH_WAIT = 5.0
# A throwaway consumer outlives a crashed reader only this long (seconds).
_INACTIVE = 60.0
# Per fetch: headers are small, bodies may be large, so ask for fewer of those at a time.
_BATCH_HEADERS = 1000
_BATCH_BODIES = 100


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One message of the stream as stored.

    ``body`` is None when it was read headers only; ``size`` is the body's length either way.
    ``stored_at`` is the server's timestamp in unix seconds, when known.
    """

    seq: int
    subject: str
    headers: Mapping[str, str]
    body: bytes | None
    size: int
    stored_at: float | None = None


class LimitsStream:
    """The stream named ``stream``, reached over ``conn`` (scanning and purging are meant for
    Limits streams; reading and deleting single messages work on any)."""

    def __init__(self, conn: Connection, stream: str) -> None:
        self.conn = conn
        self.stream = stream

    async def get(self, seq: int) -> StoredMessage | None:
        """The message at ``seq`` with its body, or None when there is none."""
        return await self._read(f"cannot read message {seq} of {self.stream}", seq=seq)

    async def last(self, subject: str, *, stream_required: bool = False) -> StoredMessage | None:
        """The last message on ``subject`` (a literal subject), or None when it holds none.

        A stream that does not exist reads as empty, unless ``stream_required``: then it raises
        :class:`StreamNotFoundError` (same request, no extra cost).
        """
        return await self._read(
            f"cannot read {subject} of {self.stream}", stream_required=stream_required, subject=subject
        )

    async def last_direct(self, subject: str) -> StoredMessage | None:
        """As :meth:`last`, read directly from the stream's servers (``allow_direct``) rather
        than through the JetStream API, which answers its requests one after the other."""
        return await self._read(f"cannot read {subject} of {self.stream}", subject=subject, direct=True)

    async def next(self, subjects: str, from_seq: int = 1) -> StoredMessage | None:
        """The first message at or after ``from_seq`` on a subject matching ``subjects`` (found
        through the server's subject index), or None."""
        return await self._read(
            f"cannot read {subjects} of {self.stream}", seq=max(1, from_seq), subject=subjects, next=True
        )

    async def _read(
        self, what: str, *, stream_required: bool = False, **request: Any
    ) -> StoredMessage | None:
        with _errors(what):
            try:
                raw = await self.conn.js.get_msg(self.stream, **request)
            except nats.js.errors.NotFoundError as exc:
                if stream_required and exc.err_code == _NO_STREAM:
                    raise StreamNotFoundError(f"{what}: stream {self.stream} does not exist") from exc
                return None  # no such message, or no such stream
        body = raw.data or b""
        return StoredMessage(
            seq=int(raw.seq or request.get("seq") or 0),
            subject=raw.subject or "",
            headers=dict(raw.headers or {}),
            body=body,
            size=len(body),
            stored_at=raw.time.timestamp() if raw.time is not None else None,
        )

    async def scan(
        self, subject: str, *, bodies: bool, stop_seq: int | None = None
    ) -> AsyncGenerator[StoredMessage, None]:
        """Messages on ``subject`` (wildcards allowed), oldest first.

        Stops after ``stop_seq`` when given, so a caller that causes new messages (a replay
        whose jobs fail again) does not chase its own tail. Close the iterator (``aclosing``)
        when leaving early: that deletes the consumer at once instead of after a minute.
        """
        config = ConsumerConfig(
            ack_policy=AckPolicy.NONE,
            deliver_policy=DeliverPolicy.ALL,
            filter_subject=subject,
            headers_only=None if bodies else True,
            mem_storage=True,
            num_replicas=1,
            inactive_threshold=_INACTIVE,
        )
        with _errors(f"cannot read {self.stream}"):
            try:
                info = await self.conn.js.add_consumer(self.stream, config)
            except nats.js.errors.NotFoundError:
                return
        name = str(info.name)
        try:
            if not info.num_pending:
                return
            with _errors(f"cannot read {self.stream}"):
                sub = await self.conn.js.pull_subscribe_bind(name, self.stream)
            try:
                async for msg in self._messages(sub, name, _BATCH_BODIES if bodies else _BATCH_HEADERS):
                    meta = msg.metadata
                    if stop_seq is not None and meta.sequence.stream > stop_seq:
                        return
                    yield _stored(msg, bodies)
                    if meta.num_pending == 0:
                        return
            finally:
                with contextlib.suppress(nats.errors.Error, TimeoutError):
                    await sub.unsubscribe()
        finally:
            with contextlib.suppress(nats.errors.Error, TimeoutError):
                await self.conn.js.delete_consumer(self.stream, name)

    async def _messages(self, sub: Any, name: str, batch: int) -> AsyncIterator[Msg]:
        while True:
            try:
                with _errors(f"cannot read {self.stream}"):
                    msgs: list[Msg] = await sub.fetch(batch, timeout=_FETCH_WAIT)
            except LimitsStreamError:
                # Messages counted as pending may have been deleted or expired since: the
                # consumer then has nothing left, which is the end, not an error.
                with _errors(f"cannot read {self.stream}"):
                    info = await self.conn.js.consumer_info(self.stream, name)
                if not info.num_pending:
                    return
                raise
            for msg in msgs:
                yield msg

    async def delete(self, seq: int) -> bool:
        """Remove the message at ``seq``; False when it was already gone."""
        with _errors(f"cannot delete message {seq} of {self.stream}"):
            try:
                return bool(await self.conn.js.delete_msg(self.stream, seq))
            except nats.js.errors.NotFoundError:
                return False
            except nats.js.errors.APIError as exc:
                # A clustered stream words it "sequence N not found", a single server "no
                # message found" or "stream store EOF": all mean the message is gone.
                if exc.err_code == _NO_MESSAGE or "not found" in str(exc.description or ""):
                    return False
                raise

    async def purge(self, subject: str | None = None, *, before_seq: int | None = None) -> int:
        """Remove every message (on ``subject``, below ``before_seq``, when given).

        Returns how many were removed. Far cheaper than deleting the same messages one by one.
        """
        request: dict[str, Any] = {}
        if subject:
            request["filter"] = subject
        if before_seq is not None:
            request["seq"] = before_seq
        with _errors(f"cannot purge {self.stream}"):
            try:
                # nats-py's purge_stream keeps only "success"; the count is in the raw response.
                response = await request_json(self.conn, api_subject("STREAM.PURGE", self.stream), request)
            except ApiError as exc:
                if exc.failure.not_found:
                    return 0
                raise
        return int(response.get("purged", 0))

    async def count(self, subject: str | None = None) -> int:
        """Messages stored (on ``subject`` when given)."""
        with _errors(f"cannot read {self.stream}"):
            try:
                info = await self.conn.js.stream_info(self.stream, subjects_filter=subject)
            except nats.js.errors.NotFoundError:
                return 0
        if subject is None:
            return int(info.state.messages)
        return sum((info.state.subjects or {}).values())

    async def last_seq(self) -> int:
        """Sequence of the newest message ever stored (0 for a new or missing stream)."""
        with _errors(f"cannot read {self.stream}"):
            try:
                info = await self.conn.js.stream_info(self.stream)
            except nats.js.errors.NotFoundError:
                return 0
        return int(info.state.last_seq)


def _stored(msg: Msg, bodies: bool) -> StoredMessage:
    headers = dict(msg.headers or {})
    size_header = headers.pop(MSG_SIZE, None)
    body = msg.data if bodies else None
    try:
        size = int(size_header) if size_header is not None else len(msg.data)
    except ValueError:
        size = len(msg.data)
    meta = msg.metadata
    return StoredMessage(
        seq=int(meta.sequence.stream),
        subject=msg.subject,
        headers=headers,
        body=body,
        size=size,
        stored_at=meta.timestamp.timestamp() if meta.timestamp is not None else None,
    )


@contextlib.contextmanager
def _errors(what: str) -> Iterator[None]:
    with failures_as(what, LimitsStreamError):
        try:
            yield
        except nats.js.errors.ServiceUnavailableError as exc:
            if exc.code:
                raise  # the server answered 503, which classify reads as passing
            # nats-py's JetStream calls turn "no responders" (a restarting server, a stream
            # without a leader yet) into this error without a code, which would read as a
            # refusal: it is worth trying again.
            raise nats.errors.NoRespondersError from exc
