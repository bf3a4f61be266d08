"""The continuous pull engine (``jsworker.jetstream.consume.PullConsumer``) against real servers.

Every test talks to a nats-server started by the ``jsworker.testing`` fixtures; nothing about
the server is mocked. Streams and consumers are made with ``jsworker.jetstream.topology``
(WorkQueue stream, durable pull consumer with explicit ack).
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import nats.errors
import pytest

from jsworker.jetstream.connection import Connection, ConnectOptions
from jsworker.jetstream.consume import ConsumeError, EngineEvent, PullConsumer
from jsworker.jetstream.delivery import Delivery
from jsworker.jetstream.topology import ConsumerSpec, StreamSpec, ensure_consumer, ensure_stream

from ..support import (
    UNSETTLED,
    consumer_state_async,
    stream_messages_async,
    wait_consumer_settled_async,
    wait_until_async,
)

if TYPE_CHECKING:
    from jsworker.testing import NatsCluster, NatsServer

pytestmark = pytest.mark.anyio

STREAM = "CONSUME"
SUBJECT = "consume.jobs"
DURABLE = "workers"


# -- helpers ------------------------------------------------------------------------------


class Events:
    """An ``on_event`` hook that records (monotonic time, event, detail)."""

    def __init__(self) -> None:
        self.items: list[tuple[float, EngineEvent, str]] = []

    def __call__(self, event: EngineEvent, detail: str) -> None:
        self.items.append((time.monotonic(), event, detail))

    def details(self, event: EngineEvent) -> list[str]:
        return [detail for _, e, detail in self.items if e is event]

    def times(self, event: EngineEvent) -> list[float]:
        return [t for t, e, _ in self.items if e is event]

    def count(self, event: EngineEvent) -> int:
        return sum(1 for _, e, _ in self.items if e is event)

    def summary(self) -> str:
        return ", ".join(f"{e.value}:{d}" if d else e.value for _, e, d in self.items[-40:])


@asynccontextmanager
async def connected(*urls: str) -> AsyncIterator[Connection]:
    """A jsworker connection that reconnects fast (0.1 s between attempts)."""
    conn = await Connection.open(ConnectOptions(servers=list(urls), reconnect_wait=0.1))
    try:
        yield conn
    finally:
        await conn.nc.close()


async def make_queue(
    conn: Connection,
    *,
    stream: str = STREAM,
    durable: str = DURABLE,
    ack_wait: float = 30.0,
    replicas: int = 1,
) -> None:
    await ensure_stream(
        conn, StreamSpec(name=stream, subjects=(SUBJECT,), work_queue=True, replicas=replicas)
    )
    await ensure_consumer(
        conn,
        ConsumerSpec(
            stream=stream, name=durable, filter_subject=SUBJECT, ack_wait=ack_wait, max_ack_pending=10_000
        ),
    )


async def publish(conn: Connection, first: int, count: int, chunk: int = 250) -> None:
    """Publish bodies ``str(first) .. str(first + count - 1)`` with PubAcks, ``chunk`` at a time."""
    end = first + count
    for start in range(first, end, chunk):
        async with anyio.create_task_group() as tg:
            for i in range(start, min(start + chunk, end)):
                tg.start_soon(conn.js.publish, SUBJECT, str(i).encode())


async def publish_retrying(conn: Connection, body: bytes, within: float = 10.0) -> None:
    """One publish that tolerates a server that is still coming back (no responders, timeouts);
    a message id keeps a retry after a lost PubAck from storing the body twice."""
    await wait_until_async(
        lambda: conn.js.publish(SUBJECT, body, timeout=1.0, headers={"Nats-Msg-Id": body.decode()}),
        timeout=within,
        interval=0.1,
        message=f"the server to store {body!r}",
        ignore=(nats.errors.Error, TimeoutError),
    )


async def wait_stream_empty(url: str) -> None:
    await wait_until_async(
        lambda: stream_messages_async(url, STREAM),
        until=lambda n: n == 0,
        timeout=5,
        message="an empty stream",
    )


async def call_blocking(fn: Callable[[], Any]) -> None:
    """Run a (probably blocking) fixture method off the event loop; await it if it is async."""
    result = await anyio.to_thread.run_sync(fn)
    if inspect.isawaitable(result):
        await result


async def take(pc: PullConsumer, n: int, timeout: float = 5.0) -> list[Delivery]:
    out: list[Delivery] = []
    for _ in range(n):
        d = await pc.next(timeout=timeout)
        assert d is not None, f"only {len(out)} of {n} messages arrived"
        out.append(d)
    return out


# -- 1. exactly once, bounded buffer ------------------------------------------------------


@pytest.mark.timeout(30)
async def test_all_delivered_once_and_acked_with_bounded_pending(nats_server: NatsServer) -> None:
    """2,000 messages, max_messages=100: each delivered once (first attempt) and acked, the stream
    ends empty, several pulls were needed (refill), and pending (buffered + in flight) never exceeds
    max_messages nor drops below what is buffered."""
    async with connected(nats_server.url) as conn:
        await make_queue(conn)
        await publish(conn, 0, 2000)
        seen: Counter[bytes] = Counter()
        max_pending = 0
        async with PullConsumer(conn, STREAM, DURABLE, max_messages=100, expires=5.0) as pc:
            assert pc.pending <= 100
            while len(seen) < 2000:
                d = await pc.next(timeout=5.0)
                assert d is not None, f"stalled after {len(seen)} messages: {pc.stats}"
                max_pending = max(max_pending, pc.pending)
                assert pc.pending <= pc.max_messages
                assert len(pc.buffered()) <= pc.pending
                assert d.attempt == 1
                seen[d.body] += 1
                await d.ack()
            # Nothing else can show up: every delivery is acknowledged, and there were no more
            # of them than messages.
            assert (await wait_consumer_settled_async(nats_server.url, STREAM, DURABLE)).delivered == 2000
            assert pc.buffered() == ()
            stats = dict(pc.stats)
        await conn.flush()
        assert set(seen) == {str(i).encode() for i in range(2000)}
        assert max(seen.values()) == 1
        assert stats["pull"] >= 2000 // 100, stats
        assert stats["error"] == 0 and stats["missed_heartbeats"] == 0, stats
        assert max_pending <= 100
        await wait_stream_empty(nats_server.url)


@pytest.mark.timeout(30)
async def test_handler_takes_arrivals_and_leaves_the_rest_buffered(nats_server: NatsServer) -> None:
    """A handler that takes every other message offered to it: between the handler and next()
    every message is handed out exactly once, and pending stays within max_messages."""
    async with connected(nats_server.url) as conn:
        await make_queue(conn)
        await publish(conn, 0, 1000)
        taken: list[Delivery] = []
        offered = itertools.count()

        seen: Counter[bytes] = Counter()

        def handler(delivery: Delivery) -> bool:
            if next(offered) % 2:
                return False
            taken.append(delivery)
            if sum(seen.values()) + len(taken) == 1000:
                # The last message went to the handler while next() waited: end that wait.
                pc.stop_pulling()
            return True

        async with PullConsumer(conn, STREAM, DURABLE, max_messages=50, expires=5.0, handler=handler) as pc:
            while sum(seen.values()) + len(taken) < 1000:
                d = await pc.next(timeout=5.0)
                if d is None and sum(seen.values()) + len(taken) == 1000:
                    break
                assert d is not None, f"stalled after {sum(seen.values()) + len(taken)}: {pc.stats}"
                assert pc.pending <= pc.max_messages
                seen[d.body] += 1
                await d.ack()
            for d in taken:
                seen[d.body] += 1
                await d.ack()
            assert (await wait_consumer_settled_async(nats_server.url, STREAM, DURABLE)).delivered == 1000
            assert pc.buffered() == ()
        await conn.flush()
        assert set(seen) == {str(i).encode() for i in range(1000)}
        assert max(seen.values()) == 1
        assert 0 < len(taken) < 1000
        await wait_stream_empty(nats_server.url)


# -- 2. refill threshold ------------------------------------------------------------------


@pytest.mark.timeout(15)
async def test_refill_only_when_pending_falls_below_threshold(nats_server: NatsServer) -> None:
    """max_messages=10, default threshold 5: taking 5 leaves pending == 5 (not below): no pull;
    the 6th take leaves 4 < 5 and exactly one pull for the gap (6) follows at once."""
    async with connected(nats_server.url) as conn:
        await make_queue(conn)
        await publish(conn, 0, 30)
        events = Events()
        async with PullConsumer(conn, STREAM, DURABLE, max_messages=10, expires=30.0, on_event=events) as pc:
            assert pc.threshold == 5
            await wait_until_async(
                lambda: len(pc.buffered()) == 10, timeout=5, message="the first batch to be buffered"
            )
            assert events.details(EngineEvent.PULL) == ["10"]
            for k in range(1, 6):
                d = await pc.next(timeout=1)
                assert d is not None
                await d.ack()
                assert pc.pending == 10 - k
                assert events.details(EngineEvent.PULL) == ["10"], f"early pull after {k} takes"
            d = await pc.next(timeout=1)
            assert d is not None
            await d.ack()
            assert events.details(EngineEvent.PULL) == ["10", "6"]
            assert pc.pending == 10
            # The refill is served: the buffer fills up to max_messages again, no more pulls.
            await wait_until_async(
                lambda: len(pc.buffered()) == 10, timeout=5, message="the refill to arrive"
            )
            # Nothing is outstanding beyond the buffer, so no refill is due: neither the watchdog
            # nor an arrival pulls again before a take.
            assert pc.pending == len(pc.buffered()) == 10
            assert events.details(EngineEvent.PULL) == ["10", "6"]


@pytest.mark.timeout(15)
async def test_takes_without_waiting_start_one_top_up_at_a_time(nats_server: NatsServer) -> None:
    """take_now() sends a due top-up from a task of its own. A caller taking many in one go
    (a worker's job task going on with buffered jobs) starts one such task, not one per take
    until the first has run; that one asks for all that is missing when it runs."""
    async with connected(nats_server.url) as conn:
        await make_queue(conn)
        await publish(conn, 0, 40)
        events = Events()
        async with PullConsumer(conn, STREAM, DURABLE, max_messages=20, expires=30.0, on_event=events) as pc:
            await wait_until_async(lambda: len(pc.buffered()) == 20, timeout=5, message="the first batch")
            taken = [pc.take_now() for _ in range(15)]  # takes 11 to 15 are below the threshold
            assert all(d is not None for d in taken)
            assert len(pc._topping_up) == 1
            await wait_until_async(lambda: not pc._topping_up, timeout=5, message="the top-up sent")
            assert events.details(EngineEvent.PULL) == ["20", "15"]
            await wait_until_async(lambda: len(pc.buffered()) == 20, timeout=5, message="the top-up served")
            for d in taken:
                assert d is not None
                await d.ack()


async def test_limit_bounds_what_is_requested_and_handed_out(nats_server: NatsServer) -> None:
    """limit=13 with max_messages=10 over 30 jobs: pulls ask for 10, then only the 3 left;
    after 13 hand-outs nothing more is requested and the server delivered exactly 13."""
    async with connected(nats_server.url) as conn:
        await make_queue(conn)
        await publish(conn, 0, 30)
        events = Events()
        async with PullConsumer(
            conn, STREAM, DURABLE, max_messages=10, expires=30.0, on_event=events, limit=13
        ) as pc:
            for d in await take(pc, 13):
                await d.ack()
            assert pc.left == 0 and pc.pending == 0
            assert events.details(EngineEvent.PULL) == ["10", "3"]
            assert await pc.next(timeout=0.3) is None  # nothing was requested beyond the limit
        state = await consumer_state_async(nats_server.url, STREAM, DURABLE)
        assert state.delivered == 13 and state.pending == 17


@pytest.mark.timeout(30)
@pytest.mark.slow
async def test_bound_grows_while_taken_fast_and_falls_back_on_an_idle_queue(nats_server: NatsServer) -> None:
    """grow_to=300 over max_messages=10: while 3,000 jobs are taken as fast as they come, the
    bound grows past 10 (pulls ask for more than 10), never past 300, and pending stays within
    it. Once the queue is idle the bound falls back to 10, and what is published then is pulled
    10 at a time: a fast loop does not go on holding a large request for slow jobs to fill."""
    async with connected(nats_server.url) as conn:
        await make_queue(conn)
        await publish(conn, 0, 3000)
        events = Events()
        async with PullConsumer(
            conn, STREAM, DURABLE, max_messages=10, expires=30.0, on_event=events, grow_to=300
        ) as pc:
            bounds = set()
            for _ in range(3000):
                d = await pc.next(timeout=5.0)
                assert d is not None, f"stalled: {events.summary()}"
                assert pc.pending <= pc.bound <= 300
                bounds.add(pc.bound)
                d.ack_soon()
            assert max(bounds) > 10, bounds
            assert max(int(n) for n in events.details(EngineEvent.PULL)) > 10
            await wait_until_async(
                lambda: (pc.bound, pc.pending), until=lambda bp: bp[0] == 10 and bp[1] <= 10,
                timeout=10, message="the bound back at 10 on the idle queue",
            )  # fmt: skip
            await publish(conn, 3000, 100)
            await wait_until_async(lambda: len(pc.buffered()), until=lambda n: n == 10, timeout=5)
            state = await consumer_state_async(nats_server.url, STREAM, DURABLE)
            assert state.delivered == 3010 and state.pending == 90, state


async def test_finish_keeps_handing_out_the_buffer(nats_server: NatsServer) -> None:
    """finish() stops the pulls but leaves the buffer to take: then wait() says there is no more."""
    async with connected(nats_server.url) as conn:
        await make_queue(conn)
        await publish(conn, 0, 30)
        async with PullConsumer(conn, STREAM, DURABLE, max_messages=10, expires=30.0) as pc:
            await wait_until_async(lambda: len(pc.buffered()) == 10, timeout=5, message="10 buffered")
            await pc.finish()
            for d in await take(pc, 10):
                await d.ack()
            assert not await pc.wait(timeout=1)
        state = await consumer_state_async(nats_server.url, STREAM, DURABLE)
        assert state.delivered == 10 and state.ack_pending == 0 and state.pending == 20


def _pause_while_the_server_delivers(url: str, seconds: float) -> None:
    """Block the caller's event loop for ``seconds`` (the process standing still), meanwhile
    publishing one job from a connection of its own and waiting until the server has delivered
    it to the pull request waiting for it: it lies unread in the socket."""
    paused_at = time.monotonic()

    async def deliver() -> None:
        async with connected(url) as conn:
            await conn.js.publish(SUBJECT, b"during the pause")
            await wait_until_async(
                lambda: consumer_state_async(url, STREAM, DURABLE),
                until=lambda state: state.delivered == 1,
                timeout=5,
                message="the job delivered",
            )

    deliverer = threading.Thread(target=asyncio.run, args=(deliver(),))
    deliverer.start()
    deliverer.join()
    time.sleep(max(0.0, seconds - (time.monotonic() - paused_at)))


@pytest.mark.timeout(20)
@pytest.mark.parametrize("beat_first", [False, True], ids=["arrival-first", "heartbeat-first"])
async def test_what_the_server_sent_during_a_pause_is_forgotten(
    nats_server: NatsServer, beat_first: bool
) -> None:
    """The process stands still (here: the event loop blocked) while the server delivers a job
    into its socket, and past forget_after without a heartbeat: the server may hand that job to
    another worker before this one reads it. Whichever runs first after the pause, the read
    loop or the heartbeat, the job is forgotten (and the owner told), never handed out, and
    comes back once its ack_wait runs out (its second delivery)."""
    async with connected(nats_server.url) as conn:
        await make_queue(conn, ack_wait=1.0)
        offered: list[Delivery] = []

        def handler(delivery: Delivery) -> bool:
            offered.append(delivery)
            return True

        forgotten: list[Delivery] = []
        async with PullConsumer(
            conn,
            STREAM,
            DURABLE,
            max_messages=10,
            expires=30.0,
            handler=handler,
            forget_after=0.5,
            on_forgotten=forgotten.extend,
        ) as pc:
            await conn.flush()  # the pull request waits on the server
            # Longer than forget_after since the consumer's last heartbeat (its start).
            _pause_while_the_server_delivers(nats_server.url, 0.7)
            if beat_first:
                pc.beat()  # the heartbeat task wakes before the read loop has the job

            async def beating() -> None:
                while True:
                    await anyio.sleep(0.1)
                    for delivery in pc.beat():
                        await delivery.in_progress()

            async with anyio.create_task_group() as tg:
                tg.start_soon(beating)
                await wait_until_async(lambda: offered, timeout=10, message="a job handed out")
                tg.cancel_scope.cancel()
            assert [d.attempt for d in offered] == [2], "the job sent during the pause was handed out"
            assert pc.stats[EngineEvent.DROPPED.value] >= 1
            # Told, so that the worker counts that delivery as given back (no crash of the job's).
            assert [d.attempt for d in forgotten] == [1]
            await offered[0].ack()
        await conn.flush()
        await wait_stream_empty(nats_server.url)


async def _late_arrivals(nats_server: NatsServer, conn: Connection, pc: PullConsumer) -> None:
    """Stop ``pc`` pulling while its request for 10 waits on the server, then publish 4 jobs:
    the server delivers them to that request; return once all 4 have reached ``pc``'s inbox."""
    await wait_until_async(
        lambda: consumer_state_async(nats_server.url, STREAM, DURABLE),
        until=lambda c: c.waiting == 1,
        timeout=5,
        message="pc's request to wait on the server",
    )
    pc.stop_pulling()
    await publish(conn, 0, 4)
    await wait_until_async(
        lambda: consumer_state_async(nats_server.url, STREAM, DURABLE),
        until=lambda c: c.delivered == 4,
        timeout=5,
        message="the 4 jobs delivered to pc's request",
    )
    assert not await pc.wait(timeout=0)  # kept aside: not handed out to a stopped loop


async def test_drain_returns_what_arrived_after_the_pulls_stopped(nats_server: NatsServer) -> None:
    """Jobs that arrive between stop_pulling() and the inbox closing are returned by drain(),
    for the caller to give back counted, not given back (nak) behind its back: each such nak
    is a delivery, and a task allowing one attempt would lose its job."""
    async with connected(nats_server.url) as conn:
        await make_queue(conn)
        pc = PullConsumer(conn, STREAM, DURABLE, max_messages=10, expires=30.0)
        await pc.start()
        try:
            await _late_arrivals(nats_server, conn, pc)
            left = await pc.drain()
            assert sorted(d.body for d in left) == [b"0", b"1", b"2", b"3"]
            await conn.flush()
            state = await consumer_state_async(nats_server.url, STREAM, DURABLE)
            assert state.ack_pending == 4 and state.redelivered == 0  # none given back
            for d in left:
                await d.ack()
        finally:
            await pc.close()


async def test_finish_hands_out_what_arrived_after_the_pulls_stopped(nats_server: NatsServer) -> None:
    """finish() hands out the jobs that arrived after stop_pulling(), as it does the buffer."""
    async with connected(nats_server.url) as conn:
        await make_queue(conn)
        async with PullConsumer(conn, STREAM, DURABLE, max_messages=10, expires=30.0) as pc:
            await _late_arrivals(nats_server, conn, pc)
            await pc.finish()
            got = await take(pc, 4)
            assert [d.attempt for d in got] == [1, 1, 1, 1]
            for d in got:
                await d.ack()
            assert not await pc.wait(timeout=0)
        await wait_stream_empty(nats_server.url)


# -- 3. 408 ---------------------------------------------------------------------------------


@pytest.mark.timeout(15)
async def test_request_timeout_408_is_followed_by_new_pulls(nats_server: NatsServer) -> None:
    """expires=1.0, idle_heartbeat=0.5 on an empty consumer: within ~2.5 s the 408 Request Timeout
    statuses arrive, each is answered with a new pull, and a message published afterwards is
    still received (no watchdog involvement, no error)."""
    async with connected(nats_server.url) as conn:
        await make_queue(conn)
        events = Events()
        async with PullConsumer(
            conn, STREAM, DURABLE, max_messages=10, expires=1.0, idle_heartbeat=0.5, on_event=events
        ) as pc:
            await wait_until_async(
                lambda: (
                    any(s.startswith("408") for s in events.details(EngineEvent.STATUS))
                    and events.count(EngineEvent.PULL) >= 2
                ),
                timeout=5,
                message="a 408 answered with a new pull",
            )
            assert pc.pending == 10  # the request after the last 408 is outstanding
            assert events.count(EngineEvent.MISSED_HEARTBEATS) == 0, events.summary()
            assert events.count(EngineEvent.ERROR) == 0, events.summary()
            await conn.js.publish(SUBJECT, b"late")
            d = await pc.next(timeout=2.0)
            assert d is not None, events.summary()
            assert d.body == b"late"
            await d.ack()


# -- 4. heartbeats ----------------------------------------------------------------------------


@pytest.mark.timeout(15)
@pytest.mark.slow
async def test_idle_heartbeats_arrive_every_idle_heartbeat(nats_server: NatsServer) -> None:
    """On an idle consumer (expires=10, idle_heartbeat=0.5) a 100 Idle Heartbeat arrives about
    every 0.5 s, and with them the watchdog stays quiet."""
    async with connected(nats_server.url) as conn:
        await make_queue(conn)
        events = Events()
        async with PullConsumer(
            conn, STREAM, DURABLE, max_messages=10, expires=10.0, idle_heartbeat=0.5, on_event=events
        ) as pc:
            started = time.monotonic()
            await wait_until_async(
                lambda: events.count(EngineEvent.HEARTBEAT) >= 5, timeout=5, message="five heartbeats"
            )
            beats = events.times(EngineEvent.HEARTBEAT)
            assert 0.3 <= beats[0] - started <= 0.9, events.summary()
            gaps = sorted(b - a for a, b in itertools.pairwise(beats))
            assert 0.35 <= gaps[len(gaps) // 2] <= 0.7, gaps
            assert max(gaps) < 1.0, gaps
            assert events.count(EngineEvent.MISSED_HEARTBEATS) == 0
            assert events.count(EngineEvent.PULL) == 1
            assert pc.stats["heartbeat"] == events.count(EngineEvent.HEARTBEAT)


# -- 5. server restart while idle -------------------------------------------------------------


async def _kill_restart_and_receive(
    nats_server: NatsServer, conn: Connection, pc: PullConsumer, events: Events, hb: float
) -> None:
    """SIGKILL and restart the server under an idle consumer; a job published afterwards must
    arrive within 2 x idle_heartbeat + margin."""
    await wait_until_async(
        lambda: events.count(EngineEvent.HEARTBEAT) >= 1, timeout=3, message="a first heartbeat"
    )
    await call_blocking(nats_server.kill)
    await wait_until_async(
        lambda: not conn.is_connected, timeout=5, message="the client to see the server gone"
    )
    await call_blocking(nats_server.restart)
    await wait_until_async(lambda: conn.is_connected, timeout=10, message="the client to reconnect")
    await publish_retrying(conn, b"after-restart")
    published = time.monotonic()
    d = await pc.next(timeout=2 * hb + 2.0)
    assert d is not None, f"nothing after restart: {events.summary()}"
    assert time.monotonic() - published < 2 * hb + 2.0
    assert d.body == b"after-restart"
    await d.ack()


@pytest.mark.timeout(30)
async def test_idle_consumer_recovers_after_server_restart_via_reconnect(nats_server: NatsServer) -> None:
    """The server drops waiting pull requests when it dies. An idle consumer, server SIGKILLed and
    restarted on the same store: the reconnect hook re-pulls on the same connection, and a
    message published afterwards arrives within 2 x idle_heartbeat + margin."""
    hb = 0.5
    async with connected(nats_server.url) as conn:
        await make_queue(conn)
        events = Events()
        async with PullConsumer(
            conn, STREAM, DURABLE, max_messages=10, expires=30.0, idle_heartbeat=hb, on_event=events
        ) as pc:
            await _kill_restart_and_receive(nats_server, conn, pc, events, hb)
            assert events.count(EngineEvent.RECONNECT) >= 1, events.summary()
            assert events.count(EngineEvent.ERROR) == 0, events.summary()


@pytest.mark.timeout(30)
async def test_idle_consumer_recovers_after_server_restart_via_watchdog(nats_server: NatsServer) -> None:
    """Same restart, but with the engine's reconnect listener unregistered (``pc._unhook()``), so
    only the missed-heartbeats watchdog can notice that the outstanding request died silently:
    MISSED_HEARTBEATS fires (after > 2 x idle_heartbeat of silence), it re-pulls, and the message
    published after the restart arrives."""
    hb = 0.5
    async with connected(nats_server.url) as conn:
        await make_queue(conn)
        events = Events()
        async with PullConsumer(
            conn, STREAM, DURABLE, max_messages=10, expires=30.0, idle_heartbeat=hb, on_event=events
        ) as pc:
            assert pc._unhook is not None
            pc._unhook()  # no re-pull on reconnect: the watchdog is on its own
            await _kill_restart_and_receive(nats_server, conn, pc, events, hb)
            assert events.count(EngineEvent.RECONNECT) == 0, events.summary()
            missed = events.details(EngineEvent.MISSED_HEARTBEATS)
            assert missed, events.summary()
            assert float(missed[0].removesuffix("s silent")) >= 2 * hb - 0.05  # detail is rounded to 0.1 s
            assert events.count(EngineEvent.ERROR) == 0, events.summary()


# -- 6. restart under load ---------------------------------------------------------------------


@pytest.mark.timeout(45)
async def test_busy_consumer_loses_nothing_across_server_kill(nats_server: NatsServer) -> None:
    """3,000 messages; SIGKILL + restart of the server after ~1,000 acks while consuming. Consuming
    goes on until the stream is empty: every message seen at least once, none lost. Duplicates
    (acks lost with the old server) are allowed and printed."""
    total = 3000
    async with connected(nats_server.url) as conn:
        await make_queue(conn, ack_wait=2.0)
        await publish(conn, 0, total)
        events = Events()
        seen: Counter[bytes] = Counter()
        acked = 0
        killed_at: float | None = None
        gap = 0.0
        last = time.monotonic()
        deadline = time.monotonic() + 35
        async with (
            anyio.create_task_group() as tg,
            PullConsumer(
                conn, STREAM, DURABLE, max_messages=100, expires=5.0, idle_heartbeat=0.5, on_event=events
            ) as pc,
        ):

            async def restart_when_noticed() -> None:
                await wait_until_async(
                    lambda: not conn.is_connected, timeout=5, message="the client to see the server gone"
                )
                await call_blocking(nats_server.restart)

            async def left() -> int | str:
                try:
                    return await stream_messages_async(nats_server.url, STREAM)
                except UNSETTLED as exc:
                    return repr(exc)

            while True:
                assert time.monotonic() < deadline, (
                    f"{len(seen)}/{total} seen, stream {await left()}: {events.summary()}"
                )
                d = await pc.next(timeout=1.0)
                if d is None:
                    if len(seen) == total and conn.is_connected and await left() == 0:
                        break
                    continue
                now = time.monotonic()
                if killed_at is not None:
                    gap = max(gap, now - last)
                last = now
                assert pc.pending <= pc.max_messages
                seen[d.body] += 1
                await d.ack()
                acked += 1
                if killed_at is None and acked >= 1000:
                    killed_at = time.monotonic()
                    await call_blocking(nats_server.kill)
                    tg.start_soon(restart_when_noticed)
            stats = dict(pc.stats)
        assert killed_at is not None
        assert set(seen) == {str(i).encode() for i in range(total)}
        duplicates = sum(seen.values()) - total
        print(  # noqa: T201
            f"\nbusy restart: {total} unique, {duplicates} duplicates, longest delivery gap {gap:.2f} s, "
            f"stats {stats}"
        )
        assert stats["error"] == 0, events.summary()


# -- 7. consumer deleted ------------------------------------------------------------------------


@pytest.mark.timeout(15)
async def test_consumer_deleted_while_pulling_raises(nats_server: NatsServer) -> None:
    """Deleting the durable while a request waits ends the loop: ``next()`` raises ConsumeError
    (409 Consumer Deleted) within a few seconds, and keeps raising."""
    async with connected(nats_server.url) as conn:
        await make_queue(conn)
        events = Events()
        async with PullConsumer(
            conn, STREAM, DURABLE, max_messages=10, expires=30.0, idle_heartbeat=1.0, on_event=events
        ) as pc:
            await wait_until_async(
                lambda: consumer_state_async(nats_server.url, STREAM, DURABLE),
                until=lambda state: state.waiting == 1,
                timeout=5,
                message="the pull request to wait on the server",
            )
            await conn.js.delete_consumer(STREAM, DURABLE)
            started = time.monotonic()
            with pytest.raises(ConsumeError, match=r"(?i)consumer deleted"):
                await pc.next(timeout=5.0)
            assert time.monotonic() - started < 3.0
            with pytest.raises(ConsumeError):
                await pc.next(timeout=0.1)
            assert events.count(EngineEvent.ERROR) == 1, events.summary()


# -- 8. drain -------------------------------------------------------------------------------------


@pytest.mark.timeout(20)
async def test_drain_returns_buffer_and_naks_late_arrivals(nats_server: NatsServer) -> None:
    """``drain()`` hands back exactly the buffered messages; ``next()`` then returns None at once;
    messages that still arrive for the request sent before the drain are nak'ed, so another
    PullConsumer on the same durable gets them (as redeliveries) within seconds, long before the
    30 s ack_wait."""
    async with connected(nats_server.url) as conn:
        await make_queue(conn, ack_wait=30.0)
        await publish(conn, 0, 10)
        pc1 = PullConsumer(conn, STREAM, DURABLE, max_messages=20, expires=30.0, idle_heartbeat=1.0)
        await pc1.start()
        try:
            await wait_until_async(
                lambda: len(pc1.buffered()) == 10, timeout=5, message="10 buffered messages"
            )
            for d in await take(pc1, 3):
                await d.ack()
            left = await pc1.drain()
            assert [d.body for d in left] == [str(i).encode() for i in range(3, 10)]
            assert pc1.buffered() == ()
            with anyio.fail_after(1):
                assert await pc1.next() is None
            for d in left:
                await d.ack()
            # pc1's request (20 asked, 10 delivered) may still wait on the server: what is
            # published now is then delivered to pc1's inbox, and must be given straight back.
            # Or the server, seeing nobody listen on that inbox any more, drops the request and
            # keeps the messages. Either way it has decided once one or the other shows.
            await publish(conn, 100, 5)
            decided = await wait_until_async(
                lambda: consumer_state_async(nats_server.url, STREAM, DURABLE),
                until=lambda c: c.delivered_stream_seq >= 15 or (c.waiting == 0 and c.pending == 5),
                timeout=5,
                message="the late messages to go to pc1 or to stay on the server",
            )
            went_to_pc1 = decided.delivered_stream_seq >= 15
            assert await pc1.next(timeout=0.1) is None
            started = time.monotonic()
            async with PullConsumer(conn, STREAM, DURABLE, max_messages=20, expires=30.0) as pc2:
                got = await take(pc2, 5, timeout=5.0)
                elapsed = time.monotonic() - started
                attempts = [d.attempt for d in got]
                print(  # noqa: T201
                    f"\ndrain: late messages delivered to pc1 first: {went_to_pc1}; "
                    f"at pc2 after {elapsed:.2f} s, attempts {attempts}"
                )
                assert sorted(d.body for d in got) == [str(i).encode() for i in range(100, 105)]
                assert elapsed < 5.0  # not held until the 30 s ack_wait
                if went_to_pc1:  # they went to the drained consumer and were nak'ed, not kept
                    assert all(a >= 2 for a in attempts), attempts
                for d in got:
                    await d.ack()
            await conn.flush()
            await wait_stream_empty(nats_server.url)
        finally:
            await pc1.close()


@pytest.mark.timeout(15)
async def test_drain_does_not_inflate_attempts_of_later_jobs(nats_server: NatsServer) -> None:
    """After ``drain()`` on an idle consumer (nothing buffered, one request for 50 waiting on the
    server), a job published while no other worker waits must reach the next consumer with its
    delivery count at most 2, not bounce on the drained consumer's request (attempt 51)."""
    async with connected(nats_server.url) as conn:
        await make_queue(conn, ack_wait=30.0)
        pc1 = PullConsumer(conn, STREAM, DURABLE, max_messages=50, expires=30.0, idle_heartbeat=1.0)
        await pc1.start()
        try:
            await wait_until_async(
                lambda: consumer_state_async(nats_server.url, STREAM, DURABLE),
                until=lambda c: c.waiting == 1,
                timeout=5,
                message="pc1's request to wait on the server",
            )
            assert await pc1.drain() == []
            await conn.js.publish(SUBJECT, b"job")
            # The drained request is gone from the server (dropped at once, or after the job
            # bounced on it until it was used up): pc2 below is the only one to ask for the job.
            await wait_until_async(
                lambda: consumer_state_async(nats_server.url, STREAM, DURABLE),
                until=lambda c: c.waiting == 0,
                timeout=5,
                message="pc1's request to be dropped",
            )
            async with PullConsumer(conn, STREAM, DURABLE, max_messages=50, expires=30.0) as pc2:
                d = await pc2.next(timeout=5.0)
                assert d is not None
                await d.ack()
                print(f"\ndrain: job published after drain arrives with attempt {d.attempt}")  # noqa: T201
                assert d.attempt <= 2
        finally:
            await pc1.close()


# -- 9. cluster: leadership change -------------------------------------------------------------------


@pytest.mark.timeout(40)
async def test_consumer_leader_stepdown_in_cluster(nats_cluster: NatsCluster) -> None:
    """R3 stream and consumer in a 3-node cluster; a consumer leader stepdown while a PullConsumer
    waits voids its request (409 Leadership Change, or 503 while no leader is elected): the engine
    re-pulls and a message published afterwards is still received."""
    async with connected(*nats_cluster.urls) as conn:
        await wait_until_async(lambda: _jetstream_ready(conn), timeout=15, message="a JetStream meta leader")
        await make_queue(conn, replicas=3)

        async def consumer_leader() -> str | None:
            try:
                info = await conn.js.consumer_info(STREAM, DURABLE, timeout=0.5)
            except (nats.errors.Error, TimeoutError):
                return None
            return info.cluster.leader if info.cluster else None

        await wait_until_async(consumer_leader, timeout=10, message="a consumer leader")
        old_leader = await consumer_leader()
        events = Events()
        async with PullConsumer(
            conn, STREAM, DURABLE, max_messages=10, expires=10.0, idle_heartbeat=0.5, on_event=events
        ) as pc:
            await wait_until_async(
                lambda: events.count(EngineEvent.HEARTBEAT) >= 1, timeout=3, message="a first heartbeat"
            )
            resp = await conn.nc.request(
                f"$JS.API.CONSUMER.LEADER.STEPDOWN.{STREAM}.{DURABLE}", b"", timeout=5
            )
            assert b'"success":true' in resp.data.replace(b" ", b""), resp.data
            await wait_until_async(
                lambda: _leader_changed(consumer_leader, old_leader),
                timeout=10,
                message="a new consumer leader",
            )
            await publish_retrying(conn, b"after-stepdown")
            d = await pc.next(timeout=5.0)
            assert d is not None, events.summary()
            assert d.body == b"after-stepdown"
            await d.ack()
            print(f"\nstepdown: {old_leader} -> {await consumer_leader()}; events: {events.summary()}")  # noqa: T201
            assert events.count(EngineEvent.ERROR) == 0, events.summary()
            statuses = events.details(EngineEvent.VOIDED)
            recovered = (
                any(s.startswith("409") for s in statuses)
                or events.count(EngineEvent.NO_RESPONDERS) > 0
                or events.count(EngineEvent.MISSED_HEARTBEATS) > 0
            )
            assert recovered, events.summary()


async def _leader_changed(leader: Callable[[], Any], old: str | None) -> bool:
    new = await leader()
    return new is not None and new != old


async def _jetstream_ready(conn: Connection) -> bool:
    """True once the cluster answers JetStream API requests (a meta leader is elected)."""
    try:
        resp = await conn.nc.request("$JS.API.INFO", b"", timeout=0.5)
    except (nats.errors.Error, TimeoutError):
        return False
    return b'"error"' not in resp.data
