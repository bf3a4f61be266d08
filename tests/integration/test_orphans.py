"""Jobs whose message their queue's consumer passed without an acknowledgement (still stored
at or below its ack floor, as nats-server leaves some after a job stream's leader is killed)
are put back by the workers, each once, under the same job id; two retries now of one job at
once store one copy. The orphans are made on a real server with the consumer reset API
(nats-server 2.14+), which moves the ack floor past messages nobody acknowledged."""

from __future__ import annotations

import asyncio
import json

import pytest

from jsworker import App, JsworkerError, current_job
from jsworker._lifecycle.orphans import RESTORED_FROM, SCAN_LOOKS, OrphanWatch
from jsworker.admin import Admin
from jsworker.jetstream.connection import Connection, ConnectOptions
from jsworker.jetstream.inspect import consumer_place, stored_up_to
from jsworker.jetstream.limits_stream import LimitsStream
from jsworker.jetstream.rewind import rewind
from jsworker.testing import NatsCluster, NatsServer

from ..support import wait_until_async
from .workers import in_process_worker

pytestmark = pytest.mark.anyio


def _app(*urls: str, replicas: int = 1) -> tuple[App, dict[str, list[int]]]:
    app = App("orph", list(urls), replicas=replicas)
    runs: dict[str, list[int]] = {}

    @app.task
    async def work(n: int) -> None:
        runs.setdefault(current_job().id, []).append(n)

    return app, runs


async def _orphaned(app: App, conn: Connection, count: int, orphans: int) -> list[str]:
    """Enqueue ``count`` jobs with no worker running, then move the queue's consumer past the
    first ``orphans`` of them unacknowledged; the job ids, in order."""
    await app.provision(conn)
    ids = [(await app.tasks["work"].adelay(n)).id for n in range(count)]
    await _pass(app, conn, ids[orphans])
    return ids


async def _pass(app: App, conn: Connection, job_id: str) -> None:
    """Move the queue's consumer on to job ``job_id``, past every earlier one unacknowledged."""
    async with Admin(app) as admin:
        kept = await admin.job_message(job_id)
    assert kept is not None
    await rewind(conn, app.namespace.partition_stream(0), "default", kept.seq)


async def _below_floor(app: App, conn: Connection) -> list[int]:
    ns = app.namespace
    place = await consumer_place(conn, ns.partition_stream(0), "default")
    assert place is not None
    found = await stored_up_to(conn, ns.partition_stream(0), ns.queue_filter("default"), place.ack_floor, 100)
    return [m.seq for m in found]


async def _each_runs_once(app: App, runs: dict[str, list[int]], ids: list[str]) -> None:
    """A worker runs every job of ``ids`` once, under its own id."""
    async with in_process_worker(app):
        await wait_until_async(lambda: len(runs) == len(ids), timeout=10, message="every job")
    assert runs == {job_id: [n] for n, job_id in enumerate(ids)}


async def _looks(watch: OrphanWatch, times: int) -> list[str]:
    restored: list[str] = []
    for _ in range(times):
        restored += await watch.look("default", 0)
    return restored


async def test_jobs_their_consumer_passed_are_put_back_once(nats_server: NatsServer) -> None:
    await _put_back_once(*_app(nats_server.url), [nats_server.url])


async def test_jobs_their_consumer_passed_are_put_back_once_with_three_replicas(
    nats_cluster: NatsCluster,
) -> None:
    await _put_back_once(*_app(*nats_cluster.urls, replicas=3), nats_cluster.urls)


async def _put_back_once(app: App, runs: dict[str, list[int]], urls: list[str]) -> None:
    conn = await Connection.open(ConnectOptions(servers=urls))
    try:
        ids = await _orphaned(app, conn, 5, 3)
        orphaned = await _below_floor(app, conn)
        assert len(orphaned) == 3
        # Two workers look at once; a first look puts nothing back.
        first, second = OrphanWatch(app, conn), OrphanWatch(app, conn)
        assert list(await asyncio.gather(first.look("default", 0), second.look("default", 0))) == [[], []]
        assert await _below_floor(app, conn) == orphaned
        restored = await asyncio.gather(first.look("default", 0), second.look("default", 0))
        assert sorted(restored[0] + restored[1]) == sorted(ids[:3])
        assert await _below_floor(app, conn) == []
        jobs = LimitsStream(conn, app.namespace.partition_stream(0))
        for job_id in ids:
            assert await jobs.count(app.namespace.job_filter(job_id)) == 1, job_id
        copy = await jobs.next(app.namespace.job_filter(ids[0]))
        assert copy is not None and copy.headers[RESTORED_FROM] == str(orphaned[0])
        # Nothing more to put back on later looks.
        assert await first.look("default", 0) == [] and await second.look("default", 0) == []

        await _each_runs_once(app, runs, ids)
    finally:
        await conn.close()


async def test_a_worker_puts_back_what_its_consumers_passed(nats_server: NatsServer) -> None:
    app, runs = _app(nats_server.url)
    conn = await Connection.open(ConnectOptions(servers=[nats_server.url]))
    try:
        ids = await _orphaned(app, conn, 4, 2)
        async with in_process_worker(app, orphan_check=0.2):
            await wait_until_async(lambda: runs, until=lambda r: len(r) == 4, timeout=10, message="every job")
            # Counted once the look that put them back is over.
            await wait_until_async(
                lambda: app.metrics.registry.get_sample_value(
                    "jsworker_jobs_restored_total", {"queue": "default"}
                ),
                until=lambda n: n == 2,
                timeout=10,
                message="the count",
            )
        assert runs == {job_id: [n] for n, job_id in enumerate(ids)}
        assert await _below_floor(app, conn) == []
    finally:
        await conn.close()


async def test_quiet_looks_read_only_the_consumer_until_a_reconnect(nats_server: NatsServer) -> None:
    """Past the reads that follow its first look, a watch reads the stream again only after a
    disturbance: messages passed meanwhile wait for one (here a reconnect of the worker)."""
    app, runs = _app(nats_server.url)
    conn = await Connection.open(ConnectOptions(servers=[nats_server.url]))
    try:
        await app.provision(conn)
        ids = [(await app.tasks["work"].adelay(n)).id for n in range(3)]
        watch = OrphanWatch(app, conn)
        assert await _looks(watch, SCAN_LOOKS) == []
        await _pass(app, conn, ids[2])
        assert await _looks(watch, 3) == []
        assert len(await _below_floor(app, conn)) == 2
        await watch.reconnected()
        assert sorted(await _looks(watch, 2)) == sorted(ids[:2])
        await _each_runs_once(app, runs, ids)
    finally:
        await conn.close()


async def test_a_message_that_names_no_job_is_left_and_not_read_for_again(nats_server: NatsServer) -> None:
    """A message on the queue's subjects that names no job cannot be put back: it stays, and
    once the reads after the first look are over, a look is one request again."""
    app, _ = _app(nats_server.url)
    conn = await Connection.open(ConnectOptions(servers=[nats_server.url]))
    try:
        await app.provision(conn)
        await conn.nc.publish(f"{app.namespace.queue_filter('default')[:-2]}.a.b.c", b"{}")
        ids = [(await app.tasks["work"].adelay(n)).id for n in range(2)]
        await _pass(app, conn, ids[1])
        watch = OrphanWatch(app, conn)
        assert await _looks(watch, SCAN_LOOKS) == [ids[0]]
        assert len(await _below_floor(app, conn)) == 1
        sent = conn.nc.stats["out_msgs"]
        assert await _looks(watch, 3) == []
        assert conn.nc.stats["out_msgs"] - sent == 3  # one request each: the consumer's info
    finally:
        await conn.close()


async def test_a_new_consumer_leader_has_its_queue_read_again(nats_cluster: NatsCluster) -> None:
    """On three replicas: after the reads that follow its first look, a watch reads the
    stream again once the queue's consumer has a new leader, and puts back what that leader
    passed."""
    app, _ = _app(*nats_cluster.urls, replicas=3)
    conn = await Connection.open(ConnectOptions(servers=nats_cluster.urls))
    try:
        await app.provision(conn)
        ids = [(await app.tasks["work"].adelay(n)).id for n in range(3)]
        watch = OrphanWatch(app, conn)
        assert await _looks(watch, SCAN_LOOKS) == []
        stream = app.namespace.partition_stream(0)
        before = await consumer_place(conn, stream, "default")
        assert before is not None
        answer = await conn.nc.request(f"$JS.API.CONSUMER.LEADER.STEPDOWN.{stream}.default", b"", timeout=10)
        assert "error" not in json.loads(answer.data), answer.data
        await wait_until_async(
            lambda: consumer_place(conn, stream, "default"),
            until=lambda p: p is not None and p.term != before.term and p.term[0] is not None,
            timeout=30,
            ignore=(JsworkerError,),  # no answer while it elects one
            message="a new leader of the consumer",
        )
        await _pass(app, conn, ids[2])
        assert sorted(await _looks(watch, 2)) == sorted(ids[:2])
        assert await _below_floor(app, conn) == []
    finally:
        await conn.close()
