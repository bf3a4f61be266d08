"""Acknowledged publishes in flight (the worker's job records) against a real server: every
message stored once answered, a refusal told at once, a missing stream waited out; the same
in fast batches, where one answer covers a whole write, through refusals in a batch, a server
restart and a stream leader change."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import pytest

from jsworker._errors import EnqueueError
from jsworker.jetstream.acked import AckedPublisher
from jsworker.jetstream.connection import Connection, ConnectOptions
from jsworker.jetstream.message import OutMessage

from ..support import wait_until_async

if TYPE_CHECKING:
    from jsworker.testing import NatsCluster, NatsServer

pytestmark = pytest.mark.anyio


async def _open(*urls: str) -> Connection:
    return await Connection.open(ConnectOptions(servers=list(urls)))


_STARTED: list[AckedPublisher] = []


async def _started(conn: Connection, **options: Any) -> AckedPublisher:
    publisher = AckedPublisher(conn, **options)
    await publisher.start()
    _STARTED.append(publisher)
    return publisher


async def _close(conn: Connection) -> None:
    """Stop the test's publishers (their writes in flight), then the connection."""
    while _STARTED:
        await _STARTED.pop().close()
    await conn.close()


@pytest.mark.parametrize("batched", [False, True], ids=["single", "batched"])
async def test_every_publish_returns_once_stored(nats_server: NatsServer, batched: bool) -> None:
    conn = await _open(nats_server.url)
    try:
        js = conn.nc.jetstream()
        await js.add_stream(name="ACKED", subjects=["acked.>"], allow_msg_ttl=True, allow_batched=batched)
        publisher = await _started(conn, batched=batched)
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
        await _close(conn)


@pytest.mark.parametrize("batched", [False, True], ids=["single", "batched"])
async def test_a_refused_message_fails_at_once(nats_server: NatsServer, batched: bool) -> None:
    conn = await _open(nats_server.url)
    try:
        await conn.nc.jetstream().add_stream(
            name="SMALL", subjects=["small.>"], max_msg_size=64, allow_batched=batched
        )
        publisher = await _started(conn, timeout=0.2, patience=30, batched=batched)
        with anyio.fail_after(5), pytest.raises(EnqueueError, match=r"refused small\.big"):
            await publisher.publish(OutMessage("small.big", b"x" * 200, {}))
        await publisher.publish(OutMessage("small.ok", b"fits", {}))
        assert publisher.outstanding == 0
    finally:
        await _close(conn)


async def test_a_message_without_a_stream_is_sent_again_until_one_takes_it(nats_server: NatsServer) -> None:
    conn = await _open(nats_server.url)
    try:
        publisher = await _started(conn, timeout=0.1, patience=30)
        async with anyio.create_task_group() as tg:
            tg.start_soon(publisher.publish, OutMessage("late.1", b"kept", {}))
            await wait_until_async(lambda: publisher.outstanding == 1, message="the publish in flight")
            # No stream answered: the message is still waiting, and is stored once one exists.
            await conn.nc.jetstream().add_stream(name="LATE", subjects=["late.>"])
        assert (await conn.nc.jetstream().get_last_msg("LATE", "late.1")).data == b"kept"
        gone = await _started(conn, timeout=0.1, patience=0.5)
        with anyio.fail_after(5), pytest.raises(EnqueueError, match=r"no acknowledgement for nowhere\.1"):
            await gone.publish(OutMessage("nowhere.1", b"lost", {}))
    finally:
        await _close(conn)


async def _publish_all(publisher: AckedPublisher, msgs: list[OutMessage]) -> dict[str, BaseException | None]:
    """Send ``msgs`` in one turn of the loop (one write) and wait for every answer."""
    ended: dict[str, BaseException | None] = {}
    for msg in msgs:
        publisher.send(msg, ended.__setitem__, msg.subject)
    await publisher.drain()
    assert len(ended) == len(msgs)
    return ended


@pytest.mark.parametrize("refused", [0, 4, 9], ids=["first", "middle", "last"])
async def test_a_refusal_in_a_batch_fails_that_message_and_stores_the_others(
    nats_server: NatsServer, refused: int
) -> None:
    conn = await _open(nats_server.url)
    try:
        js = conn.nc.jetstream()
        await js.add_stream(name="MIXED", subjects=["mixed.>"], max_msg_size=64, allow_batched=True)
        publisher = await _started(conn, timeout=0.2, patience=30, batched=True)
        msgs = [OutMessage(f"mixed.{i}", b"x" * (200 if i == refused else 4), {}) for i in range(10)]
        with anyio.fail_after(5):  # told by the server, not found out by a timeout
            ended = await _publish_all(publisher, msgs)
        assert isinstance(ended.pop(f"mixed.{refused}"), EnqueueError)
        assert set(ended.values()) == {None}
        assert (await js.stream_info("MIXED")).state.messages == 9
        assert publisher.batched
    finally:
        await _close(conn)


async def test_a_stream_that_refuses_batches_gets_one_message_a_write(nats_server: NatsServer) -> None:
    conn = await _open(nats_server.url)
    try:
        js = conn.nc.jetstream()
        await js.add_stream(name="PLAIN", subjects=["plain.>"])
        publisher = await _started(conn, timeout=0.2, patience=30, batched=True)
        with anyio.fail_after(10):
            ended = await _publish_all(publisher, [OutMessage(f"plain.{i}", b"v", {}) for i in range(50)])
        assert set(ended.values()) == {None}
        assert not publisher.batched
        assert (await js.stream_info("PLAIN")).state.messages == 50
    finally:
        await _close(conn)


async def test_batches_in_flight_through_a_server_restart_are_all_stored(nats_server: NatsServer) -> None:
    conn = await _open(nats_server.url)
    try:
        js = conn.nc.jetstream()
        await js.add_stream(name="KEPT", subjects=["kept.>"], allow_batched=True)
        publisher = await _started(conn, timeout=0.2, patience=60, batched=True)

        async def restart() -> None:
            nats_server.restart()

        await _send_through(publisher, "KEPT", 3000, restart)
    finally:
        await _close(conn)


async def test_batches_in_flight_through_a_stream_leader_change_are_all_stored(
    nats_cluster: NatsCluster,
) -> None:
    conn = await _open(*nats_cluster.urls)
    try:
        await wait_until_async(lambda: _created(conn), timeout=15, message="the R3 stream")
        publisher = await _started(conn, timeout=0.2, patience=60, batched=True)

        async def step_down() -> None:
            answer = await conn.nc.request("$JS.API.STREAM.LEADER.STEPDOWN.MOVED", b"", timeout=5)
            assert b'"success":true' in answer.data.replace(b" ", b""), answer.data

        await _send_through(publisher, "MOVED", 2000, step_down)
    finally:
        await _close(conn)


async def _send_through(
    publisher: AckedPublisher, stream: str, count: int, disturb: Callable[[], Awaitable[None]]
) -> None:
    """Send ``count`` messages to ``stream`` in writes of 50 with ``disturb`` a third of the
    way; every one must end stored (some may be stored twice, sent again after the
    disturbance; none may be missing)."""
    prefix = stream.lower()
    ended: dict[int, BaseException | None] = {}
    for i in range(count):
        publisher.send(OutMessage(f"{prefix}.{i}", b"v", {}), ended.__setitem__, i)
        if i == count // 3:
            await disturb()
        if i % 50 == 0:
            await anyio.lowlevel.checkpoint()  # a write; some are lost with the disturbance
    with anyio.fail_after(30):
        await publisher.drain()
    assert len(ended) == count and set(ended.values()) == {None}
    info = await publisher.conn.nc.jetstream().stream_info(stream, subjects_filter=f"{prefix}.>")
    assert len(info.state.subjects or {}) == count


async def _created(conn: Connection) -> bool:
    try:
        await conn.nc.jetstream().add_stream(
            name="MOVED", subjects=["moved.>"], num_replicas=3, allow_batched=True
        )
    except Exception:  # no meta leader yet
        return False
    return True


async def test_publishers_writing_batches_at_once_each_hear_only_of_their_own(
    nats_server: NatsServer,
) -> None:
    """Workers write records to one stream at the same moments, each numbering its writes
    from the start: a batch is known to the server by its id alone, so each publisher's ids
    must be its own. Every message told stored is stored, for every publisher."""
    conns = [await _open(nats_server.url) for _ in range(3)]
    try:
        js = conns[0].nc.jetstream()
        await js.add_stream(name="SHARED", subjects=["shared.>"], allow_batched=True)
        # The default timeout: one much shorter sends batches again before a loaded server
        # can answer them.
        publishers = [await _started(conn, patience=30, batched=True) for conn in conns]
        ended: dict[str, BaseException | None] = {}
        for round_ in range(5):
            # One write of 300 from each, in the same turn of the loop: the same batch numbers
            # at the server at the same time.
            for p, publisher in enumerate(publishers):
                for i in range(300):
                    subject = f"shared.{p}.{round_}.{i}"
                    publisher.send(OutMessage(subject, b"v", {}), ended.__setitem__, subject)
            await anyio.lowlevel.checkpoint()
        with anyio.fail_after(60):
            for publisher in publishers:
                await publisher.drain()
        assert len(ended) == 4500 and set(ended.values()) == {None}
        info = await js.stream_info("SHARED", subjects_filter="shared.>")
        assert len(info.state.subjects or {}) == 4500
    finally:
        while _STARTED:
            await _STARTED.pop().close()
        for conn in conns:
            await conn.close()


@pytest.mark.parametrize("batched", [False, True], ids=["single", "batched"])
async def test_a_server_slower_than_the_timeout_is_heard(nats_server: NatsServer, batched: bool) -> None:
    """Every answer comes after its write's timeout, and the write has been sent again by
    then: what the late answers say was stored ends stored, not given up on after patience."""
    conn = await _open(nats_server.url)
    try:
        js = conn.nc.jetstream()
        await js.add_stream(name="SLOW", subjects=["slow.>"], allow_batched=batched)
        # Far below a round trip: no answer is ever in time.
        publisher = await _started(conn, timeout=0.0002, patience=5, batched=batched)
        with anyio.fail_after(10):
            ended = await _publish_all(publisher, [OutMessage(f"slow.{i}", b"v", {}) for i in range(200)])
        assert set(ended.values()) == {None}
        info = await js.stream_info("SLOW", subjects_filter="slow.>")
        assert len(info.state.subjects or {}) == 200
    finally:
        await _close(conn)
