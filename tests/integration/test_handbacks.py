"""Jobs a stopping worker gives back keep their attempts, against a real nats-server: a job of
a task with max_retries=0 that a stopping worker held runs on the next worker instead of being
dead-lettered as poison."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from jsworker import App, current_job
from jsworker._runtime.handbacks import HandBackCounts
from jsworker._runtime.settings import WorkerSettings
from jsworker._runtime.worker import Worker
from jsworker.jetstream.connection import Connection
from jsworker.jetstream.delivery import Delivery
from jsworker.jetstream.limits_stream import LimitsStream
from jsworker.testing import NatsServer

from ..support import stream_messages_async, wait_until_async
from .workers import wait_buffered

pytestmark = pytest.mark.anyio


def _app(url: str, runs: Counter[tuple[int, int]], gate: asyncio.Event) -> App:
    """Tasks without retries that count each run as (job number, attempt); job -1 waits for
    ``gate``."""
    app = App("handback", url)

    @app.task(max_retries=0)
    async def once(i: int) -> None:
        runs[i, current_job().attempt] += 1
        if i < 0:
            await gate.wait()

    return app


async def _drain_with_new_worker(app: App, runs: Counter[tuple[int, int]], n: int) -> None:
    worker = Worker(app, WorkerSettings(concurrency=10, grace=5))
    run = asyncio.create_task(worker.run())
    try:
        await wait_until_async(lambda: len(runs) >= n, timeout=30, message=f"{n} runs")
    finally:
        worker.stop()
        await run
        await app.aclose()


async def _handbacks(app: App, seq: int) -> int:
    conn = await app.producer.connection()
    found = await LimitsStream(conn, app.namespace.claims_stream).last(app.namespace.handback_subject(seq))
    return int(found.body) if found is not None and found.body else 0


async def test_jobs_a_stopping_worker_held_run_on_the_next_one(nats_server: NatsServer) -> None:
    """Five jobs buffered behind a running one when the worker stops: given back, then run by
    the next worker at their second delivery, and none dead-lettered."""
    runs: Counter[tuple[int, int]] = Counter()
    gate = asyncio.Event()
    app = _app(nats_server.url, runs, gate)
    once = app.tasks["once"]
    await app.provision()
    await once.adelay(-1)
    await app.aclose()
    worker = Worker(app, WorkerSettings(concurrency=1, max_messages=10, grace=5))
    run = asyncio.create_task(worker.run())
    try:
        await wait_until_async(lambda: (-1, 1) in runs, timeout=30, message="the first job to start")
        jobs = await once.adelay_many([(i,) for i in range(5)])
        await wait_buffered(worker, 5)
        worker.stop()
        gate.set()
        await run
    finally:
        worker.stop()
        await app.aclose()
    assert [await _handbacks(app, job.seq) for job in jobs] == [1] * 5
    await app.aclose()
    await _drain_with_new_worker(app, runs, 6)
    assert runs == Counter({(-1, 1): 1, **{(i, 2): 1 for i in range(5)}})
    assert await stream_messages_async(nats_server.url, app.namespace.dlq_stream) == 0


async def test_a_job_cancelled_at_the_end_of_grace_runs_again(nats_server: NatsServer) -> None:
    """A running job outlasts the grace period: cancelled and given back, it runs again on the
    next worker although its task allows no retry."""
    runs: Counter[tuple[int, int]] = Counter()
    gate = asyncio.Event()
    app = _app(nats_server.url, runs, gate)
    await app.provision()
    job = await app.tasks["once"].adelay(-1)
    await app.aclose()
    worker = Worker(app, WorkerSettings(concurrency=1, grace=0.2))
    run = asyncio.create_task(worker.run())
    try:
        await wait_until_async(lambda: (-1, 1) in runs, timeout=30, message="the job to start")
        worker.stop()
        await run
    finally:
        worker.stop()
        await app.aclose()
    assert await _handbacks(app, job.seq) == 1
    await app.aclose()
    gate.set()
    await _drain_with_new_worker(app, runs, 2)
    assert runs == Counter({(-1, 1): 1, (-1, 2): 1})
    assert await stream_messages_async(nats_server.url, app.namespace.dlq_stream) == 0
    assert await stream_messages_async(nats_server.url, app.namespace.stream) == 0


async def test_a_job_delivered_again_without_hand_backs_is_still_poison(nats_server: NatsServer) -> None:
    """What the count excuses is only what stopping workers gave back: a job whose worker
    vanished (here: its delivery left unsettled until ack_wait) counts as a crash, and with no
    crash allowed it is dead-lettered."""
    runs: Counter[tuple[int, int]] = Counter()
    app = App("handback", nats_server.url)

    @app.task(max_retries=0, max_crashes=0, ack_wait=1)
    async def once(i: int) -> None:
        runs[i, current_job().attempt] += 1

    await app.provision()
    await once.adelay(0)
    conn = await app.producer.connection()
    # A worker that took the job and died: pulled, never acked.
    sub = await conn.js.pull_subscribe_bind("default", app.namespace.stream)
    taken = await sub.fetch(1, timeout=5)
    assert len(taken) == 1
    await app.aclose()
    worker = Worker(app, WorkerSettings(concurrency=1, grace=1))
    run = asyncio.create_task(worker.run())
    try:
        await wait_until_async(
            lambda: stream_messages_async(nats_server.url, app.namespace.dlq_stream),
            until=lambda n: n == 1,
            timeout=30,
            message="the job dead-lettered",
        )
    finally:
        worker.stop()
        await run
        await app.aclose()
    assert not runs


class _Verbs:
    """Where the deliveries below send their verbs: recorded, since no consumer holds them."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes]] = []

    async def publish(self, subject: str, payload: bytes) -> None:
        self.sent.append((subject, payload))

    def put(self, subject: str, payload: bytes) -> None:
        self.sent.append((subject, payload))


async def test_two_workers_counting_one_job_at_once_lose_no_count(nats_server: NatsServer) -> None:
    """Two workers give back the same job (two deliveries of it, as after an ack_wait expiry)
    at the same moment, three times over: the compare-and-set writes keep all six counts."""
    app = App("handback", nats_server.url)
    await app.provision()
    conns = [await Connection.open(app.connect_options("worker")) for _ in range(2)]
    try:
        workers = [HandBackCounts(app, conn) for conn in conns]
        verbs = _Verbs()
        reply = f"$JS.ACK.{app.namespace.stream}.default.1.7.1.1700000000000000000.0"
        for _ in range(3):
            await asyncio.gather(
                *(worker.give_back([Delivery(verbs, "s", reply, b"", None)]) for worker in workers)
            )
    finally:
        for conn in conns:
            await conn.nc.close()
    assert await _handbacks(app, 7) == 6
    assert verbs.sent == [(reply, b"-NAK")] * 6  # each given back once counted
    await app.aclose()
