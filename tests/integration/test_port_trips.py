"""What ports from Celery and arq tripped on, each reproduced on a real server with a worker:
middleware told of every workflow member under its real id, signature arguments encoded
through the task's annotations, and Celery's list of one link."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from jsworker import App, ConfigurationError, EnqueueError, JobContext, Middleware, OutgoingJob
from jsworker.testing import NatsServer
from jsworker.workflows import Workflow, chain, chord, group

from .workers import in_process_worker

pytestmark = pytest.mark.anyio


class Tracking(Middleware):
    """A task-tracking table as ports build it: a row per enqueued job, by its id."""

    def __init__(self) -> None:
        self.enqueued: Counter[str] = Counter()
        self.ran: dict[str, dict[str, str]] = {}

    def on_enqueue(self, job: OutgoingJob) -> None:
        self.enqueued[job.id] += 1
        job.headers["X-Tenant"] = "acme"

    async def around_run(self, job: JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
        self.ran[job.id] = dict(job.headers)
        return await call_next()


@dataclasses.dataclass
class Doc:
    path: Path
    pages: int


def make_app(url: str, tracking: Tracking) -> App:
    app = App("ports", url, workflows=True, middleware=[tracking])

    @app.task
    async def ingest(doc: Doc) -> int:
        assert isinstance(doc.path, Path)  # decoded through the annotation, as for .delay
        return doc.pages

    @app.task
    async def size(n: int) -> int:
        return n

    @app.task(store_result=True)
    async def total(counts: list[int], label: str) -> str:
        return f"{label}: {sum(counts)}"

    @app.task(store_result=True)
    async def shout(text: str) -> str:
        return text.upper()

    @app.task(store_result=True)
    async def follow(value: str) -> str:
        return f"{value}!"

    return app


async def test_middleware_hears_every_workflow_job_once_under_its_own_id(nats_server: NatsServer) -> None:
    tracking = Tracking()
    app = make_app(nats_server.url, tracking)
    size, total = app.tasks["size"], app.tasks["total"]
    async with in_process_worker(app):
        flow = await chord(group([size.s(i) for i in range(3)]), total.s("pages")).aapply()
        assert await flow.aresult(timeout=30) == "pages: 3"
        plain = await group([size.s(7)]).aapply()
        await plain.aresult(timeout=30)
    jobs = [f"{flow.id}-m{i}" for i in range(3)] + [f"{flow.id}-cb", f"{plain.id}-m0"]
    # Each job once, by the id it ran under; no id that no job has.
    assert tracking.enqueued == Counter(jobs)
    assert set(tracking.ran) == set(jobs)
    # What on_enqueue set reached every job.
    assert all(headers.get("X-Tenant") == "acme" for headers in tracking.ran.values())


async def test_signature_arguments_are_encoded_through_the_annotations(nats_server: NatsServer) -> None:
    tracking = Tracking()
    app = make_app(nats_server.url, tracking)
    ingest, total = app.tasks["ingest"], app.tasks["total"]
    async with in_process_worker(app):
        flow = await chain(ingest.s(Doc(Path("/d"), 4)), total.si([1, 2], "fixed")).aapply()
        assert await flow.aresult(timeout=30) == "fixed: 3"
    with pytest.raises(TypeError, match=r"doc.*path") as caught:
        await group([ingest.s(Doc(object(), 1))]).aapply()  # type: ignore[arg-type]
    assert "ingest" in str(caught.value)


async def test_a_list_of_one_link_is_the_link(nats_server: NatsServer) -> None:
    app = make_app(nats_server.url, Tracking())
    shout, follow = app.tasks["shout"], app.tasks["follow"]
    async with in_process_worker(app):
        job = await shout.aapply(("hi",), link=[follow.s()])
        # The job and its link are a two-step workflow under the job's id.
        assert await Workflow(app, job.id).aresult(timeout=30) == "HI!"
    with pytest.raises(ConfigurationError, match="link takes one signature, not 2"):
        await shout.aapply(("hi",), link=[follow.s(), follow.s()])
    with pytest.raises(ConfigurationError, match="link_error takes a signature"):
        await shout.aapply(("hi",), link_error="follow")  # type: ignore[arg-type]


async def test_middleware_added_after_the_app_is_made_runs_everywhere(nats_server: NatsServer) -> None:
    """A layout that imports the app from the middleware's module adds it afterwards."""
    tracking = Tracking()
    app = App("ports_late", nats_server.url)

    @app.task(store_result=True)
    async def echo(text: str) -> str:
        return text

    app.add_middleware(tracking)
    async with in_process_worker(app):
        job = await echo.adelay("hi")
        assert await job.aresult(timeout=30) == "hi"
    assert tracking.enqueued == Counter([job.id])
    assert tracking.ran[job.id]["X-Tenant"] == "acme"


@pytest.mark.timeout(60)
async def test_a_per_call_timeout_bounds_an_enqueue_during_an_outage(nats_server: NatsServer) -> None:
    """A web request's enqueue gives up after its own timeout, not the app's 60 s; enqueued
    again under the id the error names once the server is back, the job runs once."""
    app = App("ports_outage", nats_server.url, publish_timeout=60)
    runs: Counter[int] = Counter()

    @app.task(store_result=True)
    async def charge(order: int) -> int:
        runs[order] += 1
        return order

    await charge.aapply((0,), timeout=10)  # connected, streams made
    nats_server.kill()
    with pytest.raises(EnqueueError, match=r"within 0.5s \(timeout=\)") as caught:
        await charge.aapply((1,), timeout=0.5)
    assert caught.value.job_id is not None
    nats_server.restart()
    async with in_process_worker(app):
        again = await charge.aapply((1,), job_id=caught.value.job_id, timeout=10)
        assert await again.aresult(timeout=30) == 1
    assert runs[1] == 1
