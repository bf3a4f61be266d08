"""Delayed and fired jobs a relay's consumer passed without an acknowledgement (as nats-server
leaves some when a stream's leader is killed while a failed move waits out its ``nak`` delay)
are handed out again by the workers, and run once. The passing is made on a real server with
the consumer reset API (nats-server 2.14+), as in test_orphans.py."""

from __future__ import annotations

import pytest

from jsworker import App, current_job
from jsworker._core.layout import FIRED_CONSUMER, LATER_CONSUMER
from jsworker._lifecycle.orphans import OrphanWatch
from jsworker.jetstream.connection import Connection, ConnectOptions
from jsworker.jetstream.limits_stream import LimitsStream
from jsworker.jetstream.rewind import rewind
from jsworker.testing import NatsServer

from ..support import wait_until_async
from .workers import in_process_worker

pytestmark = pytest.mark.anyio


def _app(url: str) -> tuple[App, dict[str, int]]:
    app = App("orphmove", url)
    runs: dict[str, int] = {}

    @app.task
    async def work() -> None:
        job_id = current_job().id
        runs[job_id] = runs.get(job_id, 0) + 1

    return app, runs


async def _pass_over(conn: Connection, stream: str, consumer: str, subjects: str) -> int:
    """Wait for a message on ``subjects`` in ``stream``, then move ``consumer`` past it
    unacknowledged; its sequence."""
    reader = LimitsStream(conn, stream)
    waiting = await wait_until_async(
        lambda: reader.next(subjects), timeout=15, message=f"a message on {subjects}"
    )
    assert waiting is not None
    await rewind(conn, stream, consumer, waiting.seq + 1)
    return waiting.seq


async def _runs_once(app: App, runs: dict[str, int], job_id: str, consumer: str) -> None:
    """A worker looking for passed messages every 0.2 s runs ``job_id`` once and counts one
    message handed out again by ``consumer``."""
    async with in_process_worker(app, orphan_check=0.2):
        await wait_until_async(lambda: runs, until=lambda r: job_id in r, timeout=20, message="the job")
        registry = app.metrics.registry
        await wait_until_async(
            lambda: registry.get_sample_value("jsworker_jobs_restored_total", {"queue": consumer}),
            until=lambda n: n == 1,
            timeout=10,
            message="the count",
        )
    assert runs == {job_id: 1}


async def test_a_delayed_job_its_relay_passed_runs_once(nats_server: NatsServer) -> None:
    app, runs = _app(nats_server.url)
    conn = await Connection.open(ConnectOptions(servers=[nats_server.url]))
    try:
        await app.provision(conn)
        job = await app.tasks["work"].aapply((), countdown=0.5)  # waits for a worker to move it
        ns = app.namespace
        await _pass_over(conn, ns.stream, LATER_CONSUMER, ns.later_subjects)
        await _runs_once(app, runs, job.id, LATER_CONSUMER)
    finally:
        await conn.close()


async def test_a_fired_job_its_relay_passed_runs_once(nats_server: NatsServer) -> None:
    app, runs = _app(nats_server.url)
    conn = await Connection.open(ConnectOptions(servers=[nats_server.url]))
    try:
        await app.provision(conn)
        ns = app.namespace
        job = await app.tasks["work"].aapply((), countdown=1.5)
        jobs = LimitsStream(conn, ns.stream)
        async with in_process_worker(app):
            # Made a schedule; the worker stops before it fires.
            await wait_until_async(
                lambda: jobs.count(ns.later_subjects), until=lambda n: n == 0, timeout=10, message="the move"
            )
        passed = await _pass_over(conn, ns.schedules_stream, FIRED_CONSUMER, ns.fired_subjects)
        # Seen on two reads in a row before it is handed out again: a message acknowledged an
        # instant ago may still be stored.
        watch = OrphanWatch(app, conn)
        where = (ns.schedules_stream, FIRED_CONSUMER, ns.fired_subjects)
        assert await watch.look_relay(*where) == []
        assert await watch.look_relay(*where) == [passed]
        assert await watch.look_relay(*where) == []  # handed out now: not passed any more
        async with in_process_worker(app):
            await wait_until_async(lambda: runs, until=lambda r: job.id in r, timeout=20, message="the job")
        assert runs == {job.id: 1}
    finally:
        await conn.close()
