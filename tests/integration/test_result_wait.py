"""Waiting for a result whose record reaches no subscription."""

from __future__ import annotations

import asyncio

import pytest

from jsworker import App
from jsworker._lifecycle.waiter import ResultWaiter
from jsworker.testing import NatsServer

from ..support import wait_until_async
from .workers import in_process_worker

pytestmark = pytest.mark.anyio


async def test_a_record_the_subscription_never_saw_is_read_again(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record of a job that finishes after the wait's first read, as one published just
    before the wait's subscription started and stored by the server only after that read: it
    reaches no subscription, yet the wait returns the result (a read made again soon after),
    long before its timeout."""
    app = App("waits", nats_server.url)
    gate, started = asyncio.Event(), asyncio.Event()

    @app.task(store_result=True)
    async def held() -> str:
        started.set()
        await gate.wait()
        return "done"

    reads = 0
    read = ResultWaiter._read

    async def counted(self: ResultWaiter, job_id: str) -> None:
        nonlocal reads
        reads += 1
        await read(self, job_id)

    async def deaf(self: ResultWaiter, subject: str, data: bytes) -> None:
        """What the subscription hears of a record published before it started: nothing."""

    monkeypatch.setattr(ResultWaiter, "_read", counted)
    monkeypatch.setattr(ResultWaiter, "_on_record", deaf)
    async with in_process_worker(app, queues=["default"]):
        job = await held.adelay()
        await asyncio.wait_for(started.wait(), 10)
        waiting = asyncio.ensure_future(job.aresult(timeout=30))
        await wait_until_async(lambda: reads, timeout=10, message="the wait's first read")
        assert not waiting.done()
        gate.set()
        assert await asyncio.wait_for(waiting, 10) == "done"
    await app.aclose()
