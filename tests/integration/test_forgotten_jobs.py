"""A job a worker forgets (it stood still past the job's ack wait, or lost its connection)
comes back from the server through no fault of its own: that delivery is counted as handed
back, so even a task that allows no crash (``max_crashes=0``) runs it rather than take it for
one that kills its workers."""

from __future__ import annotations

import asyncio

import pytest

from jsworker import App, JobState
from jsworker.testing import NatsServer

from ..support import wait_until_async
from .workers import in_process_worker, wait_buffered

pytestmark = pytest.mark.anyio


async def test_a_forgotten_job_comes_back_as_a_hand_back_not_a_crash(nats_server: NatsServer) -> None:
    app = App("forgot", nats_server.url, ack_wait=1, max_retries=0, max_crashes=0)
    gate, ran = asyncio.Event(), list[int]()

    @app.task
    async def hold() -> None:
        await gate.wait()

    @app.task
    async def victim() -> None:
        ran.append(1)

    async with in_process_worker(app, concurrency=1) as worker:
        await hold.adelay()
        await wait_until_async(lambda: worker.in_flight == 1, timeout=10, message="the hold to run")
        job = await victim.adelay()
        await wait_buffered(worker, 1)
        # As a pause past its ack wait would have it: the buffered job is forgotten.
        (consumer,) = worker._consumers.values()
        assert consumer.forget_buffered("a pause") == 1
        gate.set()
        await wait_until_async(lambda: ran, timeout=15, message="the forgotten job to run")
        status = await wait_until_async(
            lambda: app.astatus(job.id),
            until=lambda s: s.state is JobState.SUCCEEDED,
            timeout=10,
            message="it to succeed",
        )
    assert status.attempts is not None and status.attempts >= 2  # a later delivery ran it
