"""Streams and consumers as the app declares them, created idempotently, one namespace per app."""

from __future__ import annotations

import asyncio
import contextlib
import functools

import nats
import nats.js.errors
import pytest
from nats.js.api import RetentionPolicy, StreamConfig

from jsworker import App, EnqueueError, TopologyError
from jsworker._runtime.settings import WorkerSettings
from jsworker._runtime.worker import Worker
from jsworker.jetstream.connection import Connection
from jsworker.jetstream.publish import OutMessage, Publisher
from jsworker.testing import NatsServer

from ..support import consumer_state_async, wait_consumer_settled_async, wait_until_async

pytestmark = pytest.mark.anyio


def _app(name: str, url: str, ran: list[tuple[str, int]]) -> App:
    app = App(name, url, ack_wait=20, dlq_max_age=3600)

    @app.task
    async def work(n: int) -> None:
        ran.append((name, n))

    @app.task(queue="slow", ack_wait=45)
    async def slow(n: int) -> None:
        ran.append((name, -n))

    return app


async def test_provisioning_matches_the_declared_topology(nats_server: NatsServer) -> None:
    """Job stream (WorkQueue), DLQ stream (Limits, max_age), one durable per queue with its ack_wait."""
    app = _app("shop", nats_server.url, [])
    await app.provision()
    await app.provision()  # idempotent: a second worker starting does the same
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        jobs = await js.stream_info("JSW_SHOP")
        assert jobs.config.retention == RetentionPolicy.WORK_QUEUE
        # Producers write the job stream: it honours no rollup, schedule or time to live. A
        # delayed job waits there, on subjects no queue consumer covers, until a worker makes
        # it a schedule in the schedules stream, which only workers and operators write (and,
        # for a unique one, a marker that holds its key in the job stream meanwhile).
        assert jobs.config.subjects == ["jsw.shop.q.>", "jsw.shop.later.>", "jsw.shop.mark.>"]
        assert not jobs.config.allow_msg_schedules
        assert not jobs.config.allow_rollup_hdrs
        assert not jobs.config.allow_msg_ttl
        assert jobs.config.duplicate_window == 120
        schedules = await js.stream_info("JSW_SHOP_SCHED")
        assert schedules.config.subjects == ["jsw.shop.sched.>", "jsw.shop.fired.>"]
        assert schedules.config.retention == RetentionPolicy.WORK_QUEUE
        assert schedules.config.allow_msg_schedules is True
        claims = await js.stream_info("JSW_SHOP_CLAIMS")
        assert claims.config.subjects == ["jsw.shop.claim.>"]
        assert claims.config.max_msgs_per_subject == 1
        dlq = await js.stream_info("JSW_SHOP_DLQ")
        assert dlq.config.retention == RetentionPolicy.LIMITS
        assert dlq.config.max_age == 3600
        default = await js.consumer_info("JSW_SHOP", "default")
        slow = await js.consumer_info("JSW_SHOP", "slow")
        assert default.config.filter_subject == "jsw.shop.q.default.>"
        assert default.config.ack_wait == 20
        assert slow.config.ack_wait == 45
        assert default.config.max_deliver == -1
    finally:
        await nc.close()
        await app.aclose()


async def test_changed_settings_update_the_stream_in_place(nats_server: NatsServer) -> None:
    """A new duplicate_window is applied to the existing stream, not refused."""
    first = App("shop", nats_server.url)
    await first.provision(queues=[])
    await first.aclose()
    app = App("shop", nats_server.url, duplicate_window=30)
    await app.provision(queues=[])
    nc = await nats.connect(nats_server.url)
    try:
        assert (await nc.jetstream().stream_info("JSW_SHOP")).config.duplicate_window == 30
    finally:
        await nc.close()
        await app.aclose()


async def test_two_apps_on_one_server_do_not_interfere(nats_server: NatsServer) -> None:
    """Same task and queue names in two apps: each worker runs only its own app's jobs."""
    ran: list[tuple[str, int]] = []
    alpha, beta = _app("alpha", nats_server.url, ran), _app("beta", nats_server.url, ran)
    workers = [Worker(a, WorkerSettings(concurrency=10, grace=1)) for a in (alpha, beta)]
    runs = [asyncio.create_task(w.run()) for w in workers]
    queues = [(stream, queue) for stream in ("JSW_ALPHA", "JSW_BETA") for queue in ("default", "slow")]
    try:
        # Both workers pulling on all their queues before any job exists: each job is then
        # offered to every worker that could (wrongly) take it.
        for stream, queue in queues:
            await wait_until_async(
                functools.partial(consumer_state_async, nats_server.url, stream, queue),
                until=lambda state: state.waiting >= 1,
                timeout=20,
                message=f"a pull request on {stream}/{queue}",
                ignore=(nats.js.errors.NotFoundError,),
            )
        await alpha.tasks["work"].aapply((1,))
        await beta.tasks["work"].aapply((2,))
        await alpha.tasks["slow"].aapply((3,))
        await wait_until_async(
            lambda: sum(w.counts["succeeded"] for w in workers),
            until=lambda n: n >= 3,
            timeout=10,
            message="three jobs to succeed",
        )
        deliveries = {
            (s, q): (await wait_consumer_settled_async(nats_server.url, s, q)).delivered for s, q in queues
        }
        assert deliveries == {
            ("JSW_ALPHA", "default"): 1,
            ("JSW_ALPHA", "slow"): 1,
            ("JSW_BETA", "default"): 1,
            ("JSW_BETA", "slow"): 0,
        }
        assert sorted(ran) == [("alpha", -3), ("alpha", 1), ("beta", 2)]
        assert workers[0].counts["succeeded"] == 2
        assert workers[1].counts["succeeded"] == 1
    finally:
        for w in workers:
            w.stop()
        await asyncio.gather(*runs)
        await alpha.aclose()
        await beta.aclose()


async def test_retried_publish_never_makes_a_second_job(nats_server: NatsServer) -> None:
    """Attempts time out before their ack can arrive and are retried: the server holds one job."""
    app = App("shop", nats_server.url)
    await app.provision(queues=[])
    conn = await Connection.open(app.connect_options("operator", "test"))
    try:
        # 1 µs per attempt: the first attempt never sees its ack, so the job is sent again.
        publisher = Publisher(conn, timeout=0.000_001, retry_for=1.0)
        msg = OutMessage("jsw.shop.q.default.work", b'{"args":[1],"kwargs":{}}', {"Nats-Msg-Id": "once"})
        with contextlib.suppress(EnqueueError):
            await publisher.publish(msg)
        # A stream stores one connection's messages in the order they were sent: every attempt
        # above is stored (or dropped as a duplicate) before this one.
        after = await conn.js.publish(msg.subject, msg.body, headers={"Nats-Msg-Id": "after"})
        assert after.seq == 2
        info = await conn.js.stream_info("JSW_SHOP")
        assert info.state.messages == 2
        assert (await conn.js.get_msg("JSW_SHOP", 1)).headers == dict(msg.headers)
    finally:
        await conn.close()
        await app.aclose()


async def test_oversized_job_fails_at_enqueue_with_a_clear_error(nats_server: NatsServer) -> None:
    """Arguments larger than the server's max_payload: EnqueueError naming the limit; nothing stored."""
    app = App("shop", nats_server.url)

    @app.task
    async def big(blob: str) -> None: ...

    try:
        with pytest.raises(EnqueueError, match="max_payload"):
            await big.adelay("x" * 2_000_000)
    finally:
        await app.aclose()


async def test_a_job_stream_made_before_schedules_is_brought_up_to_date(nats_server: NatsServer) -> None:
    """A job stream as an older jsworker made it (no schedule subjects, schedules not allowed)
    keeps its jobs and gains both; a delayed job can then be stored."""
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(
            StreamConfig(
                name="JSW_OLD",
                subjects=["jsw.old.q.>"],
                retention=RetentionPolicy.WORK_QUEUE,
                duplicate_window=120,
            )
        )
        await js.publish(
            "jsw.old.q.default.work", b'{"args":[1],"kwargs":{}}', headers={"Nats-Msg-Id": "kept"}
        )
        app = _app("old", nats_server.url, [])
        work = app.tasks["work"]
        job = await work.aapply((2,), countdown=60)  # the producer finds no stream for it and updates
        assert job.scheduled_for is not None and not job.duplicate
        await app.aclose()
        info = await js.stream_info("JSW_OLD")
        assert info.config.subjects == ["jsw.old.q.>", "jsw.old.later.>", "jsw.old.mark.>"]
        assert not info.config.allow_msg_schedules
        assert info.state.messages == 2  # the old job, and the delayed one no worker scheduled yet
    finally:
        await nc.close()


async def test_a_job_stream_that_allows_schedules_is_refused_naming_the_way_out(
    nats_server: NatsServer,
) -> None:
    """A job stream as the jsworker before the schedules stream made it (schedules allowed, so
    rollups honoured for every producer): provisioning refuses to go on with it, saying how to
    move to the new layout, and leaves it as it is."""
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(
            StreamConfig(
                name="JSW_OLD",
                subjects=["jsw.old.q.>", "jsw.old.sched.>"],
                retention=RetentionPolicy.WORK_QUEUE,
                duplicate_window=120,
                allow_msg_schedules=True,
            )
        )
        app = _app("old", nats_server.url, [])
        with pytest.raises(
            TopologyError, match=r"allows message schedules.*nats stream rm JSW_OLD.*provision"
        ):
            await app.provision()
        await app.aclose()
        info = await js.stream_info("JSW_OLD")
        assert info.config.subjects == ["jsw.old.q.>", "jsw.old.sched.>"]
    finally:
        await nc.close()
