"""The connection's client against a real server: batched publishes and the header fast path."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import nats.errors
import pytest
from nats.aio.msg import Msg

from jsworker.jetstream.client import JetStreamClient
from jsworker.jetstream.connection import Connection, ConnectOptions

if TYPE_CHECKING:
    from jsworker.testing import NatsServer

pytestmark = pytest.mark.anyio


async def test_publish_many_arrives_in_order_with_headers_parsed(nats_server: NatsServer) -> None:
    conn = await Connection.open(ConnectOptions(servers=[nats_server.url]))
    try:
        assert isinstance(conn.nc, JetStreamClient)
        got: list[Msg] = []
        done = anyio.Event()

        async def on_msg(msg: Msg) -> None:
            got.append(msg)
            if len(got) == 301:
                done.set()

        await conn.nc.subscribe("many.>", cb=on_msg)
        # One batch with empty, binary and large payloads, then a message with headers.
        batch = [(f"many.{i}", b"x" * i + bytes([i % 256])) for i in range(300)]
        await conn.nc.publish_many(batch)
        await conn.nc.publish("many.h", b"", headers={"Jsw-Task": "a b", "Nats-Msg-Id": "id-1"})
        with anyio.fail_after(10):
            await done.wait()
        assert [(m.subject, m.data) for m in got[:300]] == batch
        assert got[300].headers == {"Jsw-Task": "a b", "Nats-Msg-Id": "id-1"}
        assert conn.nc.stats["out_msgs"] >= 301
    finally:
        await conn.close()


async def test_publish_many_after_close_raises(nats_server: NatsServer) -> None:
    conn = await Connection.open(ConnectOptions(servers=[nats_server.url]))
    await conn.close()
    with pytest.raises(nats.errors.ConnectionClosedError):
        await conn.nc.publish_many([("x", b"+ACK")])
