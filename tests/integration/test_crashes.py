"""A task's own failures and runs that ended with no outcome (a crash) are counted apart,
against a real nats-server: ``max_retries`` limits the first, ``max_crashes`` the second."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from jsworker import App, current_job
from jsworker.runtime.settings import WorkerSettings
from jsworker.runtime.worker import Worker
from jsworker.testing import NatsServer

from ..support import stream_messages_async, wait_until_async

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
    assert attempts == [1, 3]
    reason = (await app.astatus(job.id)).reason or ""
    assert "attempts exhausted: 2 of 2" in reason, reason
    await app.aclose()
