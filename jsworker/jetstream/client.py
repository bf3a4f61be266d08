"""The nats-py client jsworker connects with: the same client, faster on a worker's hot path.

* Every job message carries headers, and nats-py parses each header block line by line in
  Python, a sixth of a busy worker's time per no-op job. Header blocks as the servers and
  clients write them (``Name: Value`` lines, UTF-8, no stray whitespace) are parsed here in a
  few string operations; any other block, status lines included, goes to nats-py's own
  parser, so the headers a message gets are the same either way.
* Acks go out in batches; :meth:`JetStreamClient.publish_many` queues a batch as one
  protocol command instead of one ``publish`` call per message.
* The pull loop's inbox takes its messages straight from the client's reader
  (:meth:`JetStreamClient.subscribe_direct`), without a ``Msg``, a queue and a task hop each.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from operator import methodcaller

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

_HEAD = "NATS/1.0\r\n"
_END = "\r\n\r\n"
# What bytes.strip() removes, which nats-py applies to names and values.
_WHITESPACE = " \t\n\r\x0b\x0c"
_split_line = methodcaller("split", ": ", 1)

#: Called with a message's subject, reply subject, body and headers (None when it has none).
DirectHandler = Callable[[str, str, bytes, "dict[str, str] | None"], Awaitable[None]]


def parse_plain_headers(block: bytes) -> dict[str, str] | None:
    """The headers of a plain header block, or None when the block needs the full parser.

    Plain means: a bare ``NATS/1.0`` first line (no status), at least one header, strict
    UTF-8, every line ``Name: Value`` with an ASCII name free of spaces, controls and
    colons, and a value that does not start or end with whitespace.
    """
    try:
        text = block.decode()
    except UnicodeDecodeError:
        return None
    if not text.startswith(_HEAD) or not text.endswith(_END) or len(text) <= len(_HEAD) + len(_END):
        return None
    try:
        headers = dict(map(_split_line, text[len(_HEAD) : -len(_END)].split("\r\n")))
    except ValueError:  # a line without ": "
        return None
    names = "".join(headers)
    if not (names.isascii() and names.isprintable()) or " " in names or ":" in names:
        return None
    for value in headers.values():
        if value != value.strip(_WHITESPACE):
            return None
    return headers


class JetStreamClient(Client):
    """nats-py's client with :func:`parse_plain_headers` in front of its header parser,
    :meth:`publish_many` for batches of small messages and :meth:`subscribe_direct`."""

    def __init__(self) -> None:
        super().__init__()
        self._direct: dict[int, DirectHandler] = {}

    async def subscribe_direct(self, subject: str, handler: DirectHandler) -> Subscription:
        """Subscribe to ``subject`` with ``handler`` called from the client's read loop.

        Messages reach the handler in the order they arrive, one at a time; while it runs,
        nothing else is read, so it must be quick. What it raises goes to the connection's
        error callback. Unsubscribing (or draining) the returned subscription ends the route.
        """

        # nats-py's ordinary route, taken only by a message that reaches the subscription's
        # queue instead of _process_msg below.
        async def queued(msg: Msg) -> None:
            await handler(msg.subject, msg.reply, msg.data, msg.headers)

        sub = await self.subscribe(subject, cb=queued)
        self._direct[sub._id] = handler
        return sub

    async def _process_msg(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        handler = self._direct.get(sid)
        if handler is None:
            await super()._process_msg(sid, subject, reply, data, headers)
            return
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        try:
            await handler(subject.decode(), reply.decode(), data, await self._process_headers(headers))
        except Exception as exc:  # the read loop would take it for a broken connection
            await self._error_cb(exc)

    def _remove_sub(self, sid: int, max_msgs: int = 0) -> None:
        self._direct.pop(sid, None)
        super()._remove_sub(sid, max_msgs)

    async def publish_many(self, messages: Sequence[tuple[str, bytes]]) -> None:
        """Publish ``(subject, payload)`` messages without headers or reply, in this order.

        The subjects are not checked: they must be valid (reply subjects the server gave).
        Raises what ``publish`` raises when the connection is closed, draining, or cannot
        buffer them while it reconnects.
        """
        if not messages:
            return
        if self.is_closed:
            raise nats.errors.ConnectionClosedError
        if self.is_draining_pubs:
            raise nats.errors.ConnectionDrainingError
        payload_size = 0
        for _, payload in messages:
            if len(payload) > self._max_payload:
                raise nats.errors.MaxPayloadError
            payload_size += len(payload)
        if not self.is_connected and (
            self._max_pending_size <= 0 or payload_size + self._pending_data_size > self._max_pending_size
        ):
            raise nats.errors.OutboundBufferLimitError
        command = b"".join([b"PUB %s %d\r\n%s\r\n" % (s.encode(), len(p), p) for s, p in messages])
        self.stats["out_msgs"] += len(messages)
        self.stats["out_bytes"] += payload_size
        await self._send_command(command)
        if self._flush_queue is not None and self._flush_queue.empty():
            await self._flush_pending()

    async def _process_headers(self, headers: bytes) -> dict[str, str] | None:
        if headers:
            plain = parse_plain_headers(headers)
            if plain is not None:
                return plain
        parsed: dict[str, str] | None = await super()._process_headers(headers)
        return parsed
