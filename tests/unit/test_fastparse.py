"""The read loop's parser hands on exactly what nats-py's parser does, however the bytes are
cut into reads: every message with its subject, sid, reply, payload and header block, and every
other operation, in order."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest
from nats.errors import ProtocolError
from nats.protocol.parser import Parser

from jsworker.jetstream.fastparse import FastParser

Event = tuple[Any, ...]


class _Recorder:
    """What a client hears from a parser: ``dispatch`` (the fast parser's messages) and the
    coroutines nats-py's parser calls."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def dispatch(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        self.events.append(("msg", sid, subject, reply, data, headers))

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        self.events.append(("msg", sid, subject, reply, data, headers))

    async def _process_ping(self) -> None:
        self.events.append(("ping",))

    async def _process_pong(self) -> None:
        self.events.append(("pong",))

    async def _process_info(self, info: dict[str, Any]) -> None:
        self.events.append(("info", json.dumps(info, sort_keys=True)))

    async def _process_err(self, err: str) -> None:
        self.events.append(("err", err))


def _msg(sid: int, payload: bytes, reply: bytes = b"") -> bytes:
    line = b"MSG jsw.app.q.default.t.%d %d %s%d\r\n" % (
        sid,
        sid,
        reply + b" " if reply else b"",
        len(payload),
    )
    return line + payload + b"\r\n"


def _hmsg(sid: int, headers: bytes, payload: bytes, reply: bytes = b"") -> bytes:
    total = len(headers) + len(payload)
    reply_part = reply + b" " if reply else b""
    line = b"HMSG _INBOX.x %d %s%d %d\r\n" % (sid, reply_part, len(headers), total)
    return line + headers + payload + b"\r\n"


def _stream(seed: int) -> bytes:
    """A protocol stream as a server writes it: mostly job messages, now and then another op."""
    rng = random.Random(seed)
    parts = []
    for i in range(300):
        kind = rng.random()
        if kind < 0.6:
            headers = b"NATS/1.0\r\nNats-Msg-Id: %d\r\nJsw-Task: t\r\n\r\n" % i
            parts.append(_hmsg(rng.randint(1, 3), headers, b"[%d]" % i, b"$JS.ACK.S.c.1.%d.%d.1.0" % (i, i)))
        elif kind < 0.75:
            parts.append(
                _msg(rng.randint(1, 3), b"x" * rng.randint(0, 40), b"_INBOX.r" if rng.random() < 0.5 else b"")
            )
        elif kind < 0.8:
            # A status message: headers only (a heartbeat, a request timeout).
            parts.append(_hmsg(2, b"NATS/1.0 100 Idle Heartbeat\r\n\r\n", b""))
        elif kind < 0.85:
            parts.append(b"PING\r\n")
        elif kind < 0.9:
            parts.append(b"PONG\r\n")
        elif kind < 0.95:
            parts.append(b"+OK\r\n")
        else:
            parts.append(b'INFO {"server_id":"s%d","max_payload":1048576}\r\n' % i)
    return b"".join(parts)


async def _feed(parser: Parser, data: bytes, cuts: list[int]) -> None:
    start = 0
    for end in [*cuts, len(data)]:
        await parser.parse(data[start:end])
        start = end


def _heard(make: type[Parser], data: bytes, cuts: list[int]) -> list[Event]:
    client = _Recorder()
    parser = make(client)
    asyncio.run(_feed(parser, data, cuts))
    return client.events


@pytest.mark.parametrize("seed", range(12))
def test_every_operation_as_nats_py_hears_it_whatever_the_reads(seed: int) -> None:
    data = _stream(seed)
    rng = random.Random(seed)
    every = sorted(rng.sample(range(1, len(data)), len(data) // 7))  # reads of a few bytes
    few = sorted(rng.sample(range(1, len(data)), 5))  # large reads holding many messages
    expected = _heard(Parser, data, [])
    assert sum(1 for e in expected if e[0] == "msg") > 150
    for cuts in ([], every, few, list(range(1, len(data)))):
        assert _heard(FastParser, data, cuts) == expected


def test_a_read_inside_a_message_goes_on_where_nats_py_stopped() -> None:
    """After another operation, nats-py's parser may stop inside a message; the next read
    finishes it there and the fast path takes over at the next control line."""
    data = b"PING\r\n" + _msg(1, b"abcdef") + _msg(2, b"ghi")
    cut = len(b"PING\r\n") + len(b"MSG jsw.app.q.default.t.1 1 6\r\n") + 2
    assert _heard(FastParser, data, [cut]) == _heard(Parser, data, [])


def test_a_malformed_message_line_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        _heard(FastParser, b"MSG subject notanumber 5\r\nhello\r\n", [])
    with pytest.raises(ProtocolError):
        _heard(FastParser, b"HMSG subject 1 x 5\r\nhello\r\n", [])


def test_reset_forgets_a_message_half_read() -> None:
    client = _Recorder()
    parser = FastParser(client)
    asyncio.run(parser.parse(b"MSG a 1 10\r\nabc"))
    parser.reset()
    asyncio.run(parser.parse(_msg(1, b"ok")))
    assert client.events == [("msg", 1, b"jsw.app.q.default.t.1", b"", b"ok", None)]
