"""The nats-py client jsworker connects with: the same client, faster on a worker's hot path.

* Every job message carries headers, and nats-py parses each header block line by line in
  Python, a sixth of a busy worker's time per no-op job. Header blocks as the servers and
  clients write them (``Name: Value`` lines, UTF-8, no stray whitespace) are parsed here in a
  few string operations; any other block, status lines included, goes to nats-py's own
  parser, so the headers a message gets are the same either way.
* Acks go out in batches; :meth:`JetStreamClient.publish_many` queues a batch as one
  protocol command instead of one ``publish`` call per message.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import methodcaller

import nats.errors
from nats.aio.client import Client

_HEAD = "NATS/1.0\r\n"
_END = "\r\n\r\n"
# What bytes.strip() removes, which nats-py applies to names and values.
_WHITESPACE = " \t\n\r\x0b\x0c"
_split_line = methodcaller("split", ": ", 1)


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
    """nats-py's client with :func:`parse_plain_headers` in front of its header parser, and
    :meth:`publish_many` for batches of small messages."""

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
