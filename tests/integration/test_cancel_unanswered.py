"""A cancel whose delete the server did not answer (a stalled or electing leader): the
delete is sent again and the cancel ends as one told "deleted" would, whether the first try
was done or lost; never an error that leaves a job deleted with no ``cancelled`` record and
its running holder never told."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from jsworker import App, JobCancelled
from jsworker._errors import LimitsStreamError
from jsworker._lifecycle.state import JobState
from jsworker.jetstream.limits_stream import LimitsStream
from jsworker.testing import NatsServer

from .workers import in_process_worker

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["done", "lost"], ids=["first-delete-done", "first-delete-lost"])
def unanswered(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The first delete of a job stream message goes unanswered: done on the server and its
    answer lost ("done"), or lost before the server saw it ("lost"). Yields the sequences
    whose delete went unanswered."""
    real = LimitsStream.delete
    seen: list[int] = []

    async def delete(self: LimitsStream, seq: int) -> bool:
        if seen:
            return await real(self, seq)
        seen.append(seq)
        if request.param == "done":
            await real(self, seq)
        raise LimitsStreamError(f"cannot delete message {seq} of {self.stream}: timeout", transient=True)

    monkeypatch.setattr(LimitsStream, "delete", delete)
    yield seen


def _app(url: str, started: asyncio.Event, stopped: asyncio.Event) -> App:
    app = App("unanswered", url)

    @app.task(store_result=True)
    async def hold() -> None:
        started.set()
        try:
            await asyncio.Event().wait()  # until cancelled
        finally:
            stopped.set()

    return app


async def test_a_queued_job_is_cancelled(nats_server: NatsServer, unanswered: list[int]) -> None:
    app = _app(nats_server.url, asyncio.Event(), asyncio.Event())
    await app.provision()
    job = await app.tasks["hold"].adelay()
    assert await app.acancel(job.id)
    assert unanswered  # the cancel went through the unanswered delete
    assert (await app.astatus(job.id)).state is JobState.CANCELLED
    with pytest.raises(JobCancelled):
        await job.aresult(timeout=5)
    await app.aclose()


async def test_a_running_job_is_cancelled_and_stopped(nats_server: NatsServer, unanswered: list[int]) -> None:
    started, stopped = asyncio.Event(), asyncio.Event()
    app = _app(nats_server.url, started, stopped)
    async with in_process_worker(app):
        job = await app.tasks["hold"].adelay()
        await asyncio.wait_for(started.wait(), timeout=10)
        assert await app.acancel(job.id)
        assert unanswered
        await asyncio.wait_for(stopped.wait(), timeout=5)  # its holder was told
        with pytest.raises(JobCancelled):
            await job.aresult(timeout=5)
        assert (await app.astatus(job.id)).state is JobState.CANCELLED
