"""Progress on a real server: what a running task says of its progress reaches its status and
the admin listing of running jobs, from async and sync tasks; it costs nothing unasked."""

from __future__ import annotations

import asyncio
import threading

import pytest

from jsworker import Admin, App, Job, JobState, current_job
from jsworker.testing import NatsServer, job_context

from ..support import wait_until_async
from .workers import in_process_worker

pytestmark = pytest.mark.anyio


async def test_progress_reaches_status_and_the_running_list(nats_server: NatsServer) -> None:
    app = App("prog", nats_server.url)
    gate, sync_gate = asyncio.Event(), threading.Event()

    @app.task
    async def resize(n: int) -> None:
        for i in range(1, 41):  # far more calls than anyone reads: only the latest is kept
            current_job().set_progress(i / 100, f"resized {i} of {n}")
        await gate.wait()

    @app.task
    def crunch() -> None:
        current_job().set_progress(0.75)
        sync_gate.wait(30)

    async with in_process_worker(app):
        job, sync_job = await resize.adelay(100), await crunch.adelay()

        async def said(which: Job) -> bool:
            status = await which.astatus()
            return status.state is JobState.RUNNING and status.progress is not None

        await wait_until_async(lambda: said(job), timeout=10, message="progress in the status")
        status = await job.astatus()
        assert (status.progress, status.progress_message) == (0.4, "resized 40 of 100")
        await wait_until_async(lambda: said(sync_job), timeout=10, message="a sync task's progress")
        assert (await sync_job.astatus()).progress == 0.75
        async with Admin(app) as admin:
            page = await admin.jobs(state="running")
        shown = {j.id: (j.progress, j.progress_message) for j in page.items}
        assert shown[job.id] == (0.4, "resized 40 of 100") and shown[sync_job.id] == (0.75, None)
        gate.set()
        sync_gate.set()


def test_progress_is_checked_and_job_context_takes_it() -> None:
    seen: list[tuple[float, str | None]] = []
    with job_context() as ctx:
        ctx.set_progress(0.5, "half")  # the test context keeps nothing: no error either
        with pytest.raises(ValueError, match="fraction from 0 to 1"):
            ctx.set_progress(1.5)
    from jsworker._current import JobContext

    recording = JobContext("j", "t", "q", 1, 0, None, on_progress=lambda f, m: seen.append((f, m)))
    recording.set_progress(1, "x" * 500)
    assert seen == [(1.0, "x" * 200)]
