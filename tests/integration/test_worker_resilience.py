"""An in-process worker keeps working when its consumer or stream disappears, and names a task
that blocks its event loop."""

from __future__ import annotations

import asyncio
import time

import pytest

from jsworker import App
from jsworker.jetstream.connection import Connection
from jsworker.jetstream.consume import ConsumeError, PullConsumer
from jsworker.testing import NatsServer

from ..support import stream_messages_async, wait_until_async
from .workers import in_process_worker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def _app(url: str, done: list[int]) -> App:
    app = App("res", url)

    @app.task
    async def work(n: int) -> None:
        done.append(n)

    @app.task
    async def hog(seconds: float) -> None:
        time.sleep(seconds)  # noqa: ASYNC251 - blocks the event loop on purpose

    return app


@pytest.mark.parametrize("delete", ["consumer", "stream"])
async def test_deleted_consumer_or_stream_is_recreated(nats_server: NatsServer, delete: str) -> None:
    """Delete the queue's consumer (or the whole stream) under a running worker: it re-creates it
    and jobs enqueued afterwards still run."""
    done: list[int] = []
    app = _app(nats_server.url, done)
    async with in_process_worker(app) as worker:
        await app.tasks["work"].aapply((1,))
        await wait_until_async(lambda: done == [1], timeout=10, message="job 1 to run")
        assert worker.conn is not None
        js = worker.conn.js
        # Acks leave in batches within a millisecond: deleting the consumer before job 1's ack
        # got there would (rightly) deliver job 1 again from the re-created consumer.
        await wait_until_async(
            lambda: stream_messages_async(nats_server.url, "JSW_RES"),
            until=lambda n: n == 0,
            timeout=10,
            message="job 1's ack",
        )
        if delete == "consumer":
            await js.delete_consumer("JSW_RES", "default")
        else:
            await js.delete_stream("JSW_RES")
        # The pull loop noticed: what follows tests the recovery, not a job that the old
        # consumer still happened to deliver.
        await wait_until_async(
            lambda: worker.counts["engine.error"], timeout=20, message="the pull loop to see the deletion"
        )
        await app.tasks["work"].aapply((2,))  # re-creates the stream when it is gone
        await wait_until_async(lambda: done == [1, 2], timeout=20, message="job 2 to run")


async def test_pull_from_a_consumer_that_never_answers_stops(nats_server: NatsServer) -> None:
    """Only 503s (no consumer behind the subject) for longer than missing_after: ConsumeError,
    so the worker can re-create the consumer instead of retrying forever."""
    app = App("res", nats_server.url)
    await app.provision(queues=[])
    conn = await Connection.open(app.connect_options("operator", "test"))
    try:
        pc = PullConsumer(
            conn, "JSW_RES", "nobody", max_messages=5, idle_heartbeat=0.5, expires=2, missing_after=1.0
        )
        await pc.start()
        try:
            with pytest.raises(ConsumeError, match="no consumer has answered"):
                await asyncio.wait_for(pc.next(), 10)
        finally:
            await pc.close()
    finally:
        await conn.close()
        await app.aclose()


async def test_blocked_event_loop_is_reported(nats_server: NatsServer) -> None:
    """An async task that blocks the loop for 1.5 s is noticed and counted."""
    done: list[int] = []
    app = _app(nats_server.url, done)
    async with in_process_worker(app, blocked_loop_warning=0.5) as worker:
        await app.tasks["hog"].aapply((1.5,))
        await wait_until_async(
            lambda: worker.counts["succeeded"] >= 1, timeout=10, message="the hog to finish"
        )
        await wait_until_async(
            lambda: worker.counts["event_loop_blocked"] >= 1,
            timeout=10,
            message="the blocked loop to be counted",
        )
