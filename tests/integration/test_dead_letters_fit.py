"""Dead letters of jobs near the server's limits are stored, and a dead letter that could not
be stored is never reported as one."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import structlog

from jsworker import App, Reject
from jsworker._deadletters import DeadLetters
from jsworker.jetstream.connection import Connection

from ..support import stream_messages_async, wait_until_async
from .workers import in_process_worker

if TYPE_CHECKING:
    from jsworker.testing import NatsServer

pytestmark = pytest.mark.anyio


def _app(url: str, name: str) -> App:
    app = App(name, url)

    @app.task
    async def refuse() -> None:
        raise Reject("refused")

    return app


async def test_a_job_with_64_kib_of_headers_is_dead_lettered(nats_server: NatsServer) -> None:
    """65,300 bytes of the job's own headers: stored, the dead letter's headers under 64 KiB
    by leaving that header out (and saying so), and the job terminated, not retried forever."""
    app = _app(nats_server.url, "fit")
    async with in_process_worker(app) as worker:
        conn = await Connection.open(app.connect_options("operator", "test"))
        try:
            await conn.nc.publish(
                app.namespace.job_subject("default", "refuse"),
                b'{"args":[],"kwargs":{}}',
                headers={"Nats-Msg-Id": "big-1", "Jsw-Task": "refuse", "X-Big": "x" * 65_300},
            )
            await conn.flush()
        finally:
            await conn.close()
        await wait_until_async(
            lambda: worker.counts["rejected"], timeout=30, message="the job to be rejected"
        )
        await wait_until_async(
            lambda: stream_messages_async(nats_server.url, "JSW_FIT_DLQ"),
            until=lambda stored: stored == 1,
            message="its dead letter",
        )
        assert await stream_messages_async(nats_server.url, "JSW_FIT") == 0
    async with DeadLetters(app) as letters:
        (letter,) = await letters.list()
        full = await letters.get(letter.seq)
    assert full.job_id == "big-1" and full.headers_dropped == ("X-Big",)
    await app.aclose()


async def test_a_dead_letter_that_was_not_stored_is_not_reported(nats_server: NatsServer) -> None:
    """With the dead-letter stream gone, the job goes back (and is retried later) and the log
    says so; nothing claims it was dead-lettered."""
    app = _app(nats_server.url, "nostore")
    with structlog.testing.capture_logs() as logs:
        async with in_process_worker(app) as worker:
            conn = await Connection.open(app.connect_options("operator", "test"))
            try:
                await conn.js.delete_stream(app.namespace.dlq_stream)
            finally:
                await conn.close()
            await app.tasks["refuse"].aapply()
            await wait_until_async(
                lambda: any(e["event"] == "job.dead_letter_failed" for e in logs),
                timeout=30,
                message="the dead letter to fail",
            )
            await wait_until_async(
                lambda: any(e["event"] == "job.retry" for e in logs), timeout=30, message="the retry"
            )
    events = [e["event"] for e in logs]
    assert "job.dead_lettered" not in events
    assert worker.counts["rejected"] >= 1
