"""What happens at the app's storage limits: a dead-letter stream at its max_bytes drops its
oldest letters and the worker goes on settling jobs (never a refused write that would leave
jobs retrying forever)."""

from __future__ import annotations

import nats
import pytest
from prometheus_client import CollectorRegistry

from jsworker import App
from jsworker._deadletters import DeadLetters
from jsworker.testing import NatsServer

from ..support import wait_until_async
from .workers import in_process_worker

pytestmark = pytest.mark.anyio

LIMIT = 16 * 1024
PADDING = "x" * 1024  # each dead letter keeps its body: about 1.3 KiB stored per letter


async def test_a_full_dead_letter_stream_drops_its_oldest_and_jobs_go_on(nats_server: NatsServer) -> None:
    app = App("full", nats_server.url, dlq_max_bytes=LIMIT, metrics_registry=CollectorRegistry())
    done: list[int] = []

    @app.task(max_retries=0)
    async def broken(n: int, padding: str) -> None:
        raise ValueError(f"broken {n}")

    @app.task
    async def fine(n: int) -> None:
        done.append(n)

    broken_ids = []
    async with in_process_worker(app) as worker:
        for n in range(40):  # about three times what the stream may hold
            broken_ids.append((await broken.adelay(n, PADDING)).id)
            await fine.adelay(n)

        def settled() -> bool:
            return worker.counts["failed"] == 40 and len(done) == 40

        await wait_until_async(settled, timeout=30, message="every job settled")
        # Every broken job was dead-lettered at once, none given back to retry for want of room.
        numbers = app.metrics.task("default", "broken")
        assert numbers.dead_lettered["failed"] == 40
        assert numbers.retried == 0

    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        dlq = await js.stream_info("JSW_FULL_DLQ")
        jobs = await js.stream_info("JSW_FULL")
    finally:
        await nc.close()
    assert dlq.config.max_bytes == LIMIT
    assert 0 < dlq.state.bytes <= LIMIT
    assert jobs.state.messages == 0  # nothing left to redeliver
    async with DeadLetters(app) as letters:
        kept = [letter.job_id for letter in await letters.list()]
    # The newest letters are the ones kept, in order.
    assert 5 < len(kept) < 40
    assert kept == broken_ids[-len(kept) :]
