"""Recycled workers (a job budget, or memory) against a real nats-server: they give no job
back, so recycling never uses up a job's delivery attempts."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from jsworker import App, current_job
from jsworker._runtime.settings import WorkerSettings
from jsworker._runtime.worker import Worker
from jsworker.testing import NatsServer

from ..support import consumer_state_async, stream_messages_async, wait_until_async
from .workers import wait_buffered

pytestmark = pytest.mark.anyio


def _app(url: str, runs: Counter[tuple[int, int]]) -> App:
    """An app whose tasks count each run as (job number, attempt)."""
    app = App("recycle", url)

    @app.task
    async def quick(i: int) -> None:
        runs[i, current_job().attempt] += 1

    @app.task(queue="other")
    async def other(i: int) -> None:
        runs[i, current_job().attempt] += 1

    return app


async def _settled(url: str, app: App) -> int:
    """Wait until the default queue has no job left to deliver or to ack; its deliveries."""

    async def state() -> tuple[int, int]:
        found = await consumer_state_async(url, app.namespace.stream, "default")
        return found.pending + found.ack_pending, found.delivered

    found = await wait_until_async(state, until=lambda s: s[0] == 0, timeout=30, message="every job settled")
    return int(found[1])


async def test_workers_recycled_one_after_another_give_no_job_back(nats_server: NatsServer) -> None:
    """Three slots whose workers retire after 20 jobs each, with room to pull 50: before,
    each retiring worker gave back what it had pulled, and some jobs came back until their
    attempts were used up and they were dead-lettered without having failed."""
    runs: Counter[tuple[int, int]] = Counter()
    app = _app(nats_server.url, runs)
    n, budget = 600, 20
    await app.provision()
    await app.tasks["quick"].adelay_many([(i,) for i in range(n)])
    await app.aclose()
    workers: list[Worker] = []
    ending = False

    async def slot() -> None:
        while not ending and sum(runs.values()) < n:
            worker = Worker(app, WorkerSettings(concurrency=50, grace=5), job_budget=budget)
            workers.append(worker)
            await worker.run()

    slots = [asyncio.create_task(slot()) for _ in range(3)]
    try:

        async def ended() -> int:
            dead = await stream_messages_async(nats_server.url, app.namespace.dlq_stream)
            return sum(runs.values()) + dead

        await wait_until_async(ended, until=lambda e: e >= n, timeout=60, message=f"{n} jobs ended")
        delivered = await _settled(nats_server.url, app)
    finally:
        ending = True
        for worker in workers:
            worker.stop()
        await asyncio.gather(*slots)
        await app.aclose()
    assert sorted(runs) == [(i, 1) for i in range(n)]  # each job ran once, at its first attempt
    assert set(runs.values()) == {1}
    assert delivered == n
    retired = [w for w in workers if w.retired == "jobs"]
    assert len(retired) >= n // budget - 3
    # Each pulled only what it could start: exactly its budget, none left to give back.
    assert {w.counts["succeeded"] for w in retired} == {budget}
    assert await stream_messages_async(nats_server.url, app.namespace.dlq_stream) == 0


async def test_a_retiring_worker_runs_what_it_had_pulled(nats_server: NatsServer) -> None:
    """A worker retiring (for memory here) with jobs buffered on two queues runs them all
    before it stops: none comes back for a second attempt."""
    runs: Counter[tuple[int, int]] = Counter()
    app = _app(nats_server.url, runs)
    gate = asyncio.Event()

    @app.task(queue="held")
    async def held() -> None:
        runs[-1, current_job().attempt] += 1
        await gate.wait()

    await app.provision()
    await held.adelay()
    await app.aclose()
    # One slot, taken by the held job: what comes next waits in the buffers (10 per queue).
    worker = Worker(app, WorkerSettings(concurrency=1, max_messages=10, grace=10))
    run = asyncio.create_task(worker.run())
    try:
        await wait_until_async(lambda: (-1, 1) in runs, timeout=30, message="the held job to start")
        await app.tasks["quick"].adelay_many([(i,) for i in range(20)])
        await app.tasks["other"].adelay_many([(i,) for i in range(100, 120)])
        await wait_buffered(worker, 20)
        worker.retire("memory")
        gate.set()
        await asyncio.wait_for(run, 30)
    finally:
        worker.stop()
        await app.aclose()
    ran = {i for i, _ in runs} - {-1}
    assert len(ran) == 20 and all(attempt == 1 for _, attempt in runs)
    assert worker.counts["succeeded"] == 21
    # The jobs it had not pulled are still there, never delivered; the ones it ran are gone
    # once the server has taken their acks (sent on the worker's connection, read in its turn).
    await wait_until_async(
        lambda: stream_messages_async(nats_server.url, app.namespace.stream),
        until=lambda left: left == 20,
        timeout=10,
        message="the 20 jobs it ran acknowledged",
    )
