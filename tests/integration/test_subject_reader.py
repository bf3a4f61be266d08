"""``SubjectReader.window`` on a real stream: a window read in parts at once gives what one read
forward gives, across the parts' edges, with the subjects it skips and the gaps deleted
messages leave."""

from __future__ import annotations

import pytest
from nats.js.api import StreamConfig

from jsworker.jetstream.connection import Connection, ConnectOptions
from jsworker.jetstream.limits_stream import LimitsStream
from jsworker.jetstream.pages import Reads, SubjectReader
from jsworker.testing import NatsServer

pytestmark = pytest.mark.anyio


async def test_a_window_read_in_parts_is_the_window_read_forward(nats_server: NatsServer) -> None:
    conn = await Connection.open(ConnectOptions(servers=[nats_server.url]))
    try:
        await conn.js.add_stream(StreamConfig(name="WINDOW", subjects=["win.>"]))
        for i in range(1, 301):
            # Every third message on another subject, every seventh deleted: gaps of both kinds.
            await conn.js.publish(f"win.{'b' if i % 3 == 0 else 'a'}.{i}", str(i).encode())
        stream = LimitsStream(conn, "WINDOW")
        for seq in range(7, 301, 7):
            await conn.js.delete_msg("WINDOW", seq)
        reader = SubjectReader(stream, "win.a.*", Reads(), bodies=True)
        wanted = [i for i in range(1, 301) if i % 3 and i % 7]
        for start, end, keep in ((1, 301, 500), (1, 301, 50), (17, 263, 40), (290, 301, 5)):
            got = await reader.window(start, end, keep)
            expected = [i for i in wanted if start <= i < end][-keep:]
            assert [m.seq for m in got] == expected, (start, end, keep)
            assert [m.body for m in got] == [str(i).encode() for i in expected]
    finally:
        await conn.close()
