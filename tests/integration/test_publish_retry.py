"""A publish whose acknowledgement is lost (its stream leader went away with it) is asked
again within about a second, with the same ``Nats-Msg-Id``, not after the whole per-attempt
timeout: an enqueue through a leader change stalls for the election, not for five seconds."""

from __future__ import annotations

import pytest
from nats.aio.msg import Msg

from jsworker._wire.headers import MSG_ID
from jsworker.jetstream.connection import Connection, ConnectOptions
from jsworker.jetstream.message import OutMessage, Stored
from jsworker.jetstream.publish import Publisher
from jsworker.testing import NatsServer

pytestmark = pytest.mark.anyio


async def test_a_lost_acknowledgement_is_asked_again_within_the_first_seconds(
    nats_server: NatsServer,
) -> None:
    conn = await Connection.open(ConnectOptions(servers=[nats_server.url]))
    try:
        asked: list[str] = []

        # Stands for a stream whose leader took the first acknowledgement with it, and whose
        # new leader answers the second publish (the server's dedup would call it the same).
        async def leader(msg: Msg) -> None:
            asked.append((msg.headers or {}).get(MSG_ID, ""))
            if len(asked) > 1:
                await msg.respond(b'{"stream":"JSW_X","seq":7,"duplicate":true}')

        await conn.nc.subscribe("jsw.x.q.default.t.j1", cb=leader)
        # A five-second attempt timeout, and three seconds for the whole enqueue: only an
        # attempt asked again sooner than the timeout can be answered in time.
        publisher = Publisher(conn, timeout=5.0, retry_for=3.0)
        stored = await publisher.publish(OutMessage("jsw.x.q.default.t.j1", b"{}", {MSG_ID: "j1"}))
        # Its first try got no answer: the duplicate the second one reports is that try.
        assert stored == Stored(7, False)
        assert asked == ["j1", "j1"]
    finally:
        await conn.close()
