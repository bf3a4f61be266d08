"""Pause and resume with worker processes busy on the queue: the jobs handed out before the
pause finish, the server hands out nothing while the workers ask for more, a worker restarted
meanwhile stays paused too, and after the resume the rest run, each once."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path

import nats.js.errors
import pytest

from jsworker import App
from jsworker.admin import Admin
from jsworker.testing import NatsServer

from ..support import consumer_state_async, wait_until, wait_until_async
from .workers import APPS, start_worker, stop

sys.path.insert(0, str(APPS))
import pause_app


@pytest.fixture
def app(nats_server: NatsServer) -> Iterator[App]:
    pause_app.app.configure_connection([nats_server.url])
    yield pause_app.app
    pause_app.app.close()


def events(record: Path, kind: str) -> list[str]:
    """Job ids of the ``kind`` (start, end) lines, in order."""
    lines = record.read_text().splitlines() if record.exists() else []
    return [line.split()[1] for line in lines if line.startswith(f"{kind} ")]


@pytest.mark.slow
def test_pause_while_two_workers_run_jobs_and_one_restarts(
    app: App, nats_server: NatsServer, tmp_path: Path
) -> None:
    record, log, gate = tmp_path / "record", tmp_path / "log", tmp_path / "gate"
    workers = [start_worker(nats_server.url, record, log, "-c", "2", module="pause_app") for _ in range(2)]
    try:
        running = pause_app.hold.delay_many([(str(gate),)] * 4)

        async def paused_phase() -> list[str]:
            # All 4 handed out (running, or pulled ahead by a worker that runs 2 already).
            await wait_until_async(
                lambda: consumer_state_async(nats_server.url, app.namespace.stream, "default"),
                until=lambda s: s.ack_pending == 4 and s.pending == 0,
                timeout=30,
                message="4 jobs handed out",
                ignore=(nats.js.errors.NotFoundError,),  # until a worker made the consumer
            )
            async with Admin(app) as admin:
                # One worker may hold all 4 while the other still starts: both run before one
                # is stopped (a worker stopped while it imports dies by the signal).
                await wait_until_async(
                    admin.workers, until=lambda found: len(found) == 2, timeout=30, message="2 workers"
                )
                assert (await admin.pause_queue("default")).paused
                later = [job.id for job in await pause_app.hold.adelay_many([()] * 6)]
                gate.touch()  # the running jobs finish
                await wait_until_async(
                    lambda: events(record, "end"), until=lambda ended: len(ended) == 4, timeout=30
                )
                # One worker restarts while the queue is paused.
                assert stop(workers.pop(0)) == 0
                workers.append(start_worker(nats_server.url, record, log, "-c", "2", module="pause_app"))
                await wait_until_async(
                    admin.workers, until=lambda found: len(found) == 2, timeout=30, message="2 workers"
                )
                # Both workers ask for jobs and the server hands out none: all 6 wait.
                state = await wait_until_async(
                    lambda: consumer_state_async(nats_server.url, app.namespace.stream, "default"),
                    until=lambda s: s.waiting >= 2 and s.pending == 6 and s.ack_pending == 0,
                    timeout=30,
                    message="both workers asking while nothing is handed out",
                )
                assert state.delivered == 4
                assert {q.queue: q.paused for q in await admin.queues()}["default"]
                assert not set(events(record, "start")) & set(later)
                assert await admin.resume_queue("default")
                return later

        later = asyncio.run(paused_phase())
        wait_until(lambda: len(events(record, "end")) == 10, timeout=30, message="the rest after the resume")
    finally:
        gate.touch()
        for proc in workers:
            assert stop(proc) == 0
    assert sorted(events(record, "start")) == sorted([job.id for job in running] + later)
