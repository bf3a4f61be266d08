"""Acknowledged publishes in flight (the worker's job records) against a real server: every
message stored once answered, a refusal told at once, a missing stream waited out."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest

from jsworker.errors import EnqueueError
from jsworker.jetstream.acked import AckedPublisher
from jsworker.jetstream.connection import Connection, ConnectOptions
from jsworker.jetstream.message import OutMessage

from ..support import wait_until_async

if TYPE_CHECKING:
    from jsworker.testing import NatsServer

pytestmark = pytest.mark.anyio


async def _open(server: NatsServer) -> Connection:
    return await Connection.open(ConnectOptions(servers=[server.url]))


async def test_every_publish_returns_once_stored(nats_server: NatsServer) -> None:
    conn = await _open(nats_server)
    try:
        js = conn.nc.jetstream()
        await js.add_stream(name="ACKED", subjects=["acked.>"], allow_msg_ttl=True)
        publisher = AckedPublisher(conn)
        await publisher.start()
        headers = {"Nats-TTL": "60s"}
        async with anyio.create_task_group() as tg:
            for i in range(500):
                tg.start_soon(publisher.publish, OutMessage(f"acked.{i}", str(i).encode(), headers))
        assert publisher.outstanding == 0
        info = await js.stream_info("ACKED")
        assert info.state.messages == 500
        last = await js.get_last_msg("ACKED", "acked.499")
        assert last.data == b"499" and last.headers is not None and last.headers["Nats-TTL"] == "60s"
    finally:
        await conn.close()


async def test_a_refused_message_fails_at_once(nats_server: NatsServer) -> None:
    conn = await _open(nats_server)
    try:
        await conn.nc.jetstream().add_stream(name="SMALL", subjects=["small.>"], max_msg_size=64)
        publisher = AckedPublisher(conn, timeout=0.2, patience=30)
        await publisher.start()
        with anyio.fail_after(5), pytest.raises(EnqueueError, match=r"refused small\.big"):
            await publisher.publish(OutMessage("small.big", b"x" * 200, {}))
        await publisher.publish(OutMessage("small.ok", b"fits", {}))
        assert publisher.outstanding == 0
    finally:
        await conn.close()


async def test_a_message_without_a_stream_is_sent_again_until_one_takes_it(nats_server: NatsServer) -> None:
    conn = await _open(nats_server)
    try:
        publisher = AckedPublisher(conn, timeout=0.1, patience=30)
        await publisher.start()
        async with anyio.create_task_group() as tg:
            tg.start_soon(publisher.publish, OutMessage("late.1", b"kept", {}))
            await wait_until_async(lambda: publisher.outstanding == 1, message="the publish in flight")
            # No stream answered: the message is still waiting, and is stored once one exists.
            await conn.nc.jetstream().add_stream(name="LATE", subjects=["late.>"])
        assert (await conn.nc.jetstream().get_last_msg("LATE", "late.1")).data == b"kept"
        gone = AckedPublisher(conn, timeout=0.1, patience=0.5)
        await gone.start()
        with anyio.fail_after(5), pytest.raises(EnqueueError, match=r"no acknowledgement for nowhere\.1"):
            await gone.publish(OutMessage("nowhere.1", b"lost", {}))
    finally:
        await conn.close()
