"""A process task's job starts when a task process is free for it: with one task process and
two slots, the second job waits as queued ("waiting for a task process"), and its middleware's
``around_run`` (as its ``started`` event) comes only when the first job's process is free."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from jsworker import JobState
from jsworker.testing import NatsServer

from ..support import wait_until_async
from .workers import APPS, in_process_worker

sys.path.insert(0, str(APPS))
import slots_app

pytestmark = pytest.mark.anyio


async def test_a_process_tasks_job_waits_for_a_free_process_before_it_starts(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    app = slots_app.app
    app.servers = [nats_server.url]
    # One gate per job: with one shared FIFO, the second job's open for reading returned at
    # once whenever the test's open for writing (for the first job) was not yet closed, and
    # the test then waited for a reader that never came.
    gates = {name: tmp_path / f"{name}.gate" for name in ("first", "second")}
    for gate in gates.values():
        os.mkfifo(gate)

    async def let_through(name: str) -> None:
        """Returns once that job's run has opened its gate for reading, and lets it go on."""
        gate = gates[name]
        try:
            await asyncio.wait_for(asyncio.to_thread(lambda: os.close(os.open(gate, os.O_WRONLY))), 30)
        except TimeoutError:
            # A reader of our own releases the thread still blocked in open, so the test fails
            # here rather than hanging the event loop's shutdown.
            os.close(os.open(gate, os.O_RDONLY | os.O_NONBLOCK))
            raise

    slots_app.begun.ids.clear()
    async with in_process_worker(app, concurrency=2, task_processes=1):
        first = await slots_app.gated.adelay(str(tmp_path / "first"), str(gates["first"]))
        await wait_until_async((tmp_path / "first").exists, timeout=30, message="the first job running")
        second = await slots_app.gated.adelay(str(tmp_path / "second"), str(gates["second"]))
        waiting = await wait_until_async(
            lambda: app.astatus(second.id),
            until=lambda s: s.state is JobState.QUEUED and s.reason == "waiting for a task process",
            timeout=30,
            message="the second job waiting for a task process",
        )
        assert waiting.started_at is None
        # Taken up by the worker, but not begun: its around_run has not run.
        assert slots_app.begun.ids == [first.id]
        await let_through("first")
        first_pid = await first.aresult(timeout=30)
        await let_through("second")
        assert await second.aresult(timeout=30) == first_pid  # one process ran both
    assert slots_app.begun.ids == [first.id, second.id]
