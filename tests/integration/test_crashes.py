"""A task's own failures and runs that ended with no outcome (a crash) are counted apart,
against a real nats-server: ``max_retries`` limits the first, ``max_crashes`` the second."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import pytest

from jsworker import App, Task, current_job
from jsworker._lifecycle.lookup import holder_said
from jsworker._runtime.holders import attempts_said
from jsworker._runtime.settings import WorkerSettings
from jsworker._runtime.worker import Worker
from jsworker.jetstream.service import gather
from jsworker.testing import NatsServer

from ..support import connected, consumer_state_async, stream_messages_async, wait_until_async
from .workers import in_process_worker

pytestmark = pytest.mark.anyio


async def _vanish_with_the_job(app: App) -> int:
    """What a worker that dies under a job leaves: the job pulled and never settled, so the
    server hands it out again after ``ack_wait``. Returns the delivery count it was taken at."""
    conn = await app.producer.connection()
    sub = await conn.js.pull_subscribe_bind("default", app.namespace.stream)
    (taken,) = await sub.fetch(1, timeout=10)
    return int(taken.metadata.num_delivered)


async def _run_until(app: App, condition: Callable[[], object], message: str) -> None:
    """Run a worker until ``condition`` holds."""
    worker = Worker(app, WorkerSettings(concurrency=1, grace=1))
    run = asyncio.create_task(worker.run())
    try:
        await wait_until_async(condition, timeout=30, message=message)
    finally:
        worker.stop()
        await run


@pytest.mark.slow
async def test_a_crash_between_two_failures_spends_no_retry(nats_server: NatsServer) -> None:
    """max_retries=1: the first run fails, the second delivery is lost with its worker, the
    third runs (a crash is no failure) and, failing again, is the last of the two failures
    allowed: dead-lettered as exhausted, not as a job that kills its workers."""
    attempts: list[int] = []
    # A retry waits 1-2 s: long enough for the first worker to be gone when it comes back.
    app = App("crashes", nats_server.url, retry_backoff=2.0, retry_backoff_max=2.0)

    @app.task(max_retries=1, max_crashes=1, ack_wait=1)
    async def flaky(n: int) -> None:
        attempts.append(current_job().attempt)
        raise RuntimeError("fails on its own")

    await app.provision()
    job = await flaky.adelay(1)
    await app.aclose()
    await _run_until(app, lambda: attempts == [1], "the first run to fail")
    assert await _vanish_with_the_job(app) == 2
    await app.aclose()

    async def dead() -> int:
        return await stream_messages_async(nats_server.url, app.namespace.dlq_stream)

    await _run_until(app, dead, "the job to be dead-lettered")
    # Run twice: the first delivery and one after the lost one. Usually the third, but a
    # loaded server may hand the third to a pull request of the first worker's that it has
    # not dropped yet; that delivery is never started, and the fourth runs.
    assert len(attempts) == 2 and attempts[0] == 1 and attempts[1] >= 3, attempts
    reason = (await app.astatus(job.id)).reason or ""
    assert "attempts exhausted: 2 of 2" in reason, reason
    await app.aclose()


async def _ack_wait(servers: str, app: App, queue: str, seconds: float) -> None:
    """Shorten ``queue``'s acknowledgement timer on the server, as a leader's election does in
    effect for the jobs whose heartbeats it misses: the server delivers them again."""
    async with connected(servers) as nc:
        js = nc.jetstream()
        info = await js.consumer_info(app.namespace.stream, queue)
        await js.add_consumer(app.namespace.stream, dataclasses.replace(info.config, ack_wait=seconds))


def _dead(url: str, app: App) -> Callable[[], Awaitable[int]]:
    return partial(stream_messages_async, url, app.namespace.dlq_stream)


async def _waiting_task(name: str, url: str) -> tuple[App, Task[[], Any], asyncio.Event, list[int]]:
    """An app (ack_wait 30 s: heartbeats every 10 s) whose one task, with max_crashes=0 (a
    second delivery would be judged one that kills its workers), records its delivery count
    and waits for the event; provisioned. Returns the app, the task, the event and the counts."""
    app = App(name, url, ack_wait=30)
    release = asyncio.Event()
    runs: list[int] = []

    @app.task(max_crashes=0)
    async def waits() -> None:
        runs.append(current_job().attempt)
        await release.wait()

    await app.provision()
    return app, waits, release, runs


async def test_a_delivery_a_live_worker_holds_an_earlier_one_of_is_left_to_it(
    nats_server: NatsServer,
) -> None:
    """max_crashes=0: a second delivery would be judged a job that kills its workers. Worker A
    holds the job's first delivery (running, waiting) and stops pulling; the server, its timer
    run out with no heartbeat in time, delivers the job again to worker B. B asks and leaves
    it: A's run is the job's only one, it succeeds, and nothing is dead-lettered."""
    app, waits, release, runs = await _waiting_task("heldjobs", nats_server.url)
    # A takes one job and retires: it stops pulling and finishes that job (grace), so every
    # later delivery goes to B.
    a = Worker(app, WorkerSettings(concurrency=1, grace=60), job_budget=1)
    b = Worker(app, WorkerSettings(concurrency=1, grace=1))
    running = [asyncio.create_task(a.run())]
    await wait_until_async(a.started.is_set, timeout=20, message="worker A to start")
    await waits.adelay()
    await wait_until_async(lambda: runs == [1], timeout=20, message="A to run the job")
    running.append(asyncio.create_task(b.run()))
    try:
        await wait_until_async(b.started.is_set, timeout=20, message="worker B to start")
        await _ack_wait(nats_server.url, app, "default", 1.0)
        await wait_until_async(lambda: b.counts["left"], timeout=20, message="B to leave a delivery to A")
        release.set()
        await wait_until_async(
            partial(stream_messages_async, nats_server.url, app.namespace.stream),
            until=lambda n: n == 0,
            timeout=20,
            message="the job acknowledged",
        )
    finally:
        release.set()
        b.stop()
        a.stop()
        await asyncio.gather(*running)
        await app.aclose()
    assert runs == [1]
    assert await _dead(nats_server.url, app)() == 0
    assert b.counts["poison"] == 0 and a.counts["succeeded"] == 1, (a.counts, b.counts)


async def test_a_delivery_buffered_while_an_earlier_one_ran_is_left_once_that_one_settled(
    nats_server: NatsServer,
) -> None:
    """max_crashes=0, one slot: while the job's first delivery runs, the server delivers it
    again and again into the same worker's buffer (its timer shortened: no heartbeat in time).
    The first delivery succeeds and is acknowledged; the buffered ones then find its message
    gone and are left: one run, nothing dead-lettered."""
    app, waits, release, runs = await _waiting_task("bufjobs", nats_server.url)
    worker = Worker(app, WorkerSettings(concurrency=1, grace=1))
    run = asyncio.create_task(worker.run())
    try:
        await wait_until_async(worker.started.is_set, timeout=20, message="the worker to start")
        await waits.adelay()
        await wait_until_async(lambda: runs == [1], timeout=20, message="the job to run")
        await _ack_wait(nats_server.url, app, "default", 1.0)

        async def redelivered() -> int:
            state = await consumer_state_async(nats_server.url, app.namespace.stream, "default")
            return state.redelivered

        await wait_until_async(redelivered, timeout=20, message="the job delivered again")
        release.set()
        await wait_until_async(lambda: worker.counts["left"], timeout=20, message="a spare delivery left")
    finally:
        release.set()
        worker.stop()
        await run
        await app.aclose()
    assert runs == [1]
    assert await _dead(nats_server.url, app)() == 0
    assert worker.counts["poison"] == 0, worker.counts


async def test_a_worker_that_settled_a_job_says_so_when_asked_who_holds_it(nats_server: NatsServer) -> None:
    """A delivery counted as poison asks the app's workers who holds the job; one that ran it
    to its end (its acknowledgement lost, as at a leader's election) says it settled it, and
    the delivery is then acknowledged instead of dead-lettered. A status lookup, which asks
    the same, takes such an answer for no holder."""
    app, waits, release, runs = await _waiting_task("settledjobs", nats_server.url)
    release.set()
    job = await waits.adelay()
    async with in_process_worker(app):
        await wait_until_async(
            partial(stream_messages_async, nats_server.url, app.namespace.stream),
            until=lambda left: runs == [1] and left == 0,
            timeout=20,
            message="the job run and acknowledged",
        )
        conn = await app.connections.connection()
        held = app.namespace.held_subject(job.id)
        answers = await gather(conn, held, str(job.seq).encode(), wait=2.0, linger=0.2)
    attempts, settled = attempts_said(answers)
    assert settled and attempts == [], answers
    assert holder_said(answers) == {}
    await app.aclose()
