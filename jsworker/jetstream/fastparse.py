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

import re
from collections.abc import Awaitable
from typing import Any, Protocol

from nats.errors import ProtocolError
from nats.protocol.parser import AWAITING_CONTROL_LINE, MAX_CONTROL_LINE_SIZE, Parser

# The control lines of a message without and with headers, matched where they start (the
# server writes single spaces; nats-py's own patterns accept any blanks, and so do these).
_MSG = re.compile(rb"MSG[ \t]+(\S+)[ \t]+(\d+)[ \t]+(?:(\S+)[ \t]+)?(\d+)\r\n")
_HMSG = re.compile(rb"HMSG[ \t]+(\S+)[ \t]+(\d+)[ \t]+(?:(\S+)[ \t]+)?(\d+)[ \t]+(\d+)\r\n")
_CRLF = b"\r\n"

#: A message whose payload has not all arrived yet: subject, sid, reply, header and total size.
_Pending = tuple[bytes, int, bytes, int, int]


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
        pos = 0
        client = self._client
        try:
            while pos < len(buf):
                waiting = self._waiting
                if waiting is None:
                    header = buf.startswith(b"H", pos)
                    found = (_HMSG if header else _MSG).match(buf, pos)
                    if found is None:
                        if buf.find(_CRLF, pos, pos + MAX_CONTROL_LINE_SIZE) == -1:
                            break  # the line has not all arrived
                        if buf.startswith(b"HMSG" if header else b"MSG", pos):
                            raise ProtocolError("nats: malformed MSG")
                        # Another operation: nats-py's parser takes the rest of the buffer.
                        del buf[:pos]
                        pos = 0
                        await super().parse()
                        return
                    if header:
                        subject, sid, reply, head, size = found.groups()
                        waiting = (subject, int(sid), reply or b"", int(head), int(size))
                    else:
                        subject, sid, reply, size = found.groups()
                        waiting = (subject, int(sid), reply or b"", 0, int(size))
                    self._waiting = waiting
                    pos = found.end()
                subject, sid, reply, head, size = waiting
                if len(buf) - pos < size + 2:
                    break
                headers = bytes(buf[pos : pos + head]) if head else None
                payload = bytes(buf[pos + head : pos + size])
                pos += size + 2
                self._waiting = None
                pending = client.dispatch(sid, subject, reply, payload, headers)
                if pending is not None:
                    await pending
        finally:
            del buf[:pos]
