"""The connection's client against a real server: batched publishes and the header fast path."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import nats.errors
import pytest
from nats.aio.msg import Msg

from jsworker.jetstream import client as client_module
from jsworker.jetstream.client import Internal, JetStreamClient, internals_problems
from jsworker.jetstream.connection import Connection, ConnectOptions

from ..support import wait_until_async

if TYPE_CHECKING:
    from jsworker.testing import NatsServer

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["fast path", "stock nats-py"])
def fast_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Both routes: the fast paths, and nats-py's own when its internals look changed."""
    if request.param == "fast path":
        return True
    monkeypatch.setattr(client_module, "INTERNALS", (Internal("_no_such_method", "method"),))
    return False


async def test_publish_many_arrives_in_order_with_headers_parsed(
    nats_server: NatsServer, fast_path: bool
) -> None:
    conn = await Connection.open(ConnectOptions(servers=[nats_server.url]))
    try:
        assert isinstance(conn.nc, JetStreamClient)
        # The nats-py state publish_many and the direct route use, as set up by connect().
        assert conn.nc.fast_path is fast_path
        if fast_path:
            assert internals_problems(conn.nc) == []
        got: list[Msg] = []
        done = anyio.Event()

        async def on_msg(msg: Msg) -> None:
            got.append(msg)
            if len(got) == 305:
                done.set()

        await conn.nc.subscribe("many.>", cb=on_msg)
        # One batch with empty, binary and large payloads and the ack verbs (whose commands
        # are made another way), then a message with headers.
        batch = [(f"many.{i}", b"x" * i + bytes([i % 256])) for i in range(300)]
        batch += [(f"many.verb.{i}", verb) for i, verb in enumerate((b"+ACK", b"-NAK", b"+WPI", b"+TERM"))]
        await conn.nc.publish_many(batch)
        await conn.nc.publish("many.h", b"", headers={"Jsw-Task": "a b", "Nats-Msg-Id": "id-1"})
        with anyio.fail_after(10):
            await done.wait()
        assert [(m.subject, m.data) for m in got[:304]] == batch
        assert got[304].headers == {"Jsw-Task": "a b", "Nats-Msg-Id": "id-1"}
        assert conn.nc.stats["out_msgs"] >= 305
    finally:
        await conn.close()


async def test_publish_headed_many_carries_reply_and_headers(
    nats_server: NatsServer, fast_path: bool
) -> None:
    conn = await Connection.open(ConnectOptions(servers=[nats_server.url]))
    try:
        got: list[Msg] = []

        async def on_msg(msg: Msg) -> None:
            got.append(msg)

        await conn.nc.subscribe("headed.>", cb=on_msg)
        ttl = {"Nats-TTL": "5s"}
        batch = [(f"headed.{i}", f"r.{i}", ttl if i % 2 else {"A": str(i)}, b"y" * i) for i in range(50)]
        await conn.nc.publish_headed_many(batch)
        await wait_until_async(lambda: len(got) == 50, timeout=10, message="50 messages")
        assert [(m.subject, m.reply, m.headers, m.data) for m in got] == batch
    finally:
        await conn.close()


async def test_publish_many_after_close_raises(nats_server: NatsServer) -> None:
    conn = await Connection.open(ConnectOptions(servers=[nats_server.url]))
    await conn.close()
    with pytest.raises(nats.errors.ConnectionClosedError):
        await conn.nc.publish_many([("x", b"+ACK")])


async def test_subscribe_direct_delivers_in_order_and_survives_a_failing_handler(
    nats_server: NatsServer, fast_path: bool
) -> None:
    errors: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    nc = JetStreamClient()
    await nc.connect(nats_server.url, error_cb=on_error)
    try:
        got: list[tuple[str, str, bytes, dict[str, str] | None]] = []

        async def handler(subject: str, reply: str, body: bytes, headers: dict[str, str] | None) -> None:
            if body == b"boom":
                raise ValueError("handler failed")
            got.append((subject, reply, body, headers))

        assert nc.fast_path is fast_path
        sub = await nc.subscribe_direct("direct.>", handler)
        assert nc.direct_routes == (1 if fast_path else 0)
        await nc.publish("direct.a", b"1", reply="r.1", headers={"K": "v"})
        await nc.publish("direct.b", b"boom")
        for i in range(2, 200):
            await nc.publish(f"direct.{i}", str(i).encode())
        await nc.flush()
        await wait_until_async(lambda: len(got) >= 199, timeout=10, message="199 messages handled")
        assert got[0] == ("direct.a", "r.1", b"1", {"K": "v"})
        assert [body for _, _, body, _ in got[1:]] == [str(i).encode() for i in range(2, 200)]
        assert got[1][3] is None  # no headers
        assert [str(e) for e in errors] == ["handler failed"]
        assert nc.is_connected  # the failure did not reach the read loop

        await sub.unsubscribe()
        assert nc.direct_routes == 0
        sentinels: list[bytes] = []

        async def sentinel(subject: str, reply: str, body: bytes, headers: dict[str, str] | None) -> None:
            sentinels.append(body)

        await nc.subscribe_direct("sentinel", sentinel)
        await nc.publish("direct.late", b"late")
        await nc.publish("sentinel", b"after the late one")
        # The read loop takes messages in the order the server sent them: once the sentinel is
        # handled, the late message has been handled, or dropped, before it.
        await wait_until_async(lambda: sentinels, timeout=10, message="the sentinel")
        assert len(got) == 199
    finally:
        await nc.close()
