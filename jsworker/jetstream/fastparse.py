"""The read loop's protocol parser, faster on the messages a worker receives by the thousand.

nats-py's parser removes each message from the front of its buffer as it goes (a copy of
everything behind it), matches its control line with a regular expression over the whole
buffer, and hands every message to a coroutine. This one reads ``MSG`` and ``HMSG`` at an
offset, cuts the buffer once per read, and hands a message of a direct route
(``JetStreamClient.subscribe_direct``)
to its handler with a plain call, awaiting only what the handler returns. Any other operation
(``PING``, ``PONG``, ``INFO``, ``+OK``, ``-ERR``) and what follows it in the buffer go to
nats-py's own parser, as does a read that finds it in the middle of a message: it only ever
takes over at a control line.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol

from nats.errors import ProtocolError
from nats.protocol.parser import AWAITING_CONTROL_LINE, Parser

_CRLF = b"\r\n"

#: A message whose payload has not all arrived yet: subject, sid, reply, header and total size.
_Pending = tuple[bytes, int, bytes, int, int]


def _message_line(line: bytes) -> _Pending | None:
    """What the control line of a message (``MSG <subject> <sid> [reply] <size>``, or ``HMSG``
    with the header size before the total) says; None for any other line. Split at blanks,
    which costs less than a regular expression over a line this long (the server writes
    single spaces; nats-py's own patterns accept any blanks, and so does this)."""
    parts = line.split()
    count = len(parts)
    verb = parts[0] if parts else b""
    if verb == b"HMSG" and (count == 6 or count == 5):
        sid, head, size = parts[2], parts[-2], parts[-1]
        if sid.isdigit() and head.isdigit() and size.isdigit():
            return parts[1], int(sid), parts[3] if count == 6 else b"", int(head), int(size)
    elif verb == b"MSG" and (count == 5 or count == 4):
        sid, size = parts[2], parts[-1]
        if sid.isdigit() and size.isdigit():
            return parts[1], int(sid), parts[3] if count == 5 else b"", 0, int(size)
    return None


class Dispatcher(Protocol):
    """The client a parser hands its messages to (the ``nc`` of nats-py's parser)."""

    def dispatch(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> Awaitable[None] | None:
        """Hand one message to its subscription; what is left to await, if anything."""
        ...


class FastParser(Parser):
    """nats-py's :class:`~nats.protocol.parser.Parser` with the message path of this module;
    ``client`` also serves nats-py's parser (``_process_ping`` and the rest)."""

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        self._client: Dispatcher = client
        self._waiting: _Pending | None = None

    def reset(self) -> None:
        super().reset()
        self._waiting = None

    async def parse(self, data: bytes = b"") -> None:
        if self.state != AWAITING_CONTROL_LINE:
            # nats-py's parser stopped inside a message: it reads on from there.
            await super().parse(data)
            return
        buf = self.buf
        buf.extend(data)
        waiting = self._waiting
        if waiting is not None and len(buf) < waiting[4] + 2:
            return  # the rest of a message not all here yet: nothing to copy for
        # One copy of what was read, which the messages are sliced from: a slice of it is one
        # allocation, where a bytearray's slice made bytes is two (a fifth of this loop).
        view = bytes(buf)
        size_of_view = len(view)
        pos = 0
        client = self._client
        # Kept in a local while the loop runs, and stored only for a message cut off at the end.
        self._waiting = None
        try:
            while pos < size_of_view:
                if waiting is None:
                    end = view.find(_CRLF, pos)
                    if end == -1:
                        break  # the line has not all arrived
                    waiting = _message_line(view[pos:end])
                    if waiting is None:
                        if view.startswith(b"MSG", pos) or view.startswith(b"HMSG", pos):
                            raise ProtocolError("nats: malformed MSG")
                        # Another operation: nats-py's parser takes the rest of the buffer.
                        del buf[:pos]
                        pos = 0
                        await super().parse()
                        return
                    pos = end + 2
                subject, sid, reply, head, size = waiting
                if size_of_view - pos < size + 2:
                    self._waiting = waiting
                    break
                headers = view[pos : pos + head] if head else None
                payload = view[pos + head : pos + size]
                pos += size + 2
                waiting = None
                pending = client.dispatch(sid, subject, reply, payload, headers)
                if pending is not None:
                    await pending
        finally:
            del buf[:pos]
