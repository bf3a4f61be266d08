"""A process task's job starts when a task process is free for it: with one task process and
two slots, the second job waits as queued ("waiting for a task process"), and its middleware's
``around_run`` (as its ``started`` event) comes only when the first job's process is free."""

from __future__ import annotations

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
    app, gate = slots_app.app, tmp_path / "gate"
    app.servers = [nats_server.url]
    slots_app.begun.ids.clear()
    async with in_process_worker(app, concurrency=2, task_processes=1):
        first = await slots_app.gated.adelay(str(tmp_path / "first"), str(gate))
        await wait_until_async((tmp_path / "first").exists, timeout=30, message="the first job running")
        second = await slots_app.gated.adelay(str(tmp_path / "second"), str(gate))
        waiting = await wait_until_async(
            lambda: app.astatus(second.id),
            until=lambda s: s.state is JobState.QUEUED and s.reason == "waiting for a task process",
            timeout=30,
            message="the second job waiting for a task process",
        )
        assert waiting.started_at is None
        # Taken up by the worker, but not begun: its around_run has not run.
        assert slots_app.begun.ids == [first.id]
        gate.touch()
        assert await second.aresult(timeout=30) == await first.aresult(timeout=30)  # one process
    assert slots_app.begun.ids == [first.id, second.id]
