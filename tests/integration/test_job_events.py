"""Job events from a real producer and an in-process worker: the exact sequence per job, and a
job never depends on an event being sent."""

from __future__ import annotations

from collections import defaultdict

import nats
import pytest
from prometheus_client import CollectorRegistry

from jsworker import App, Reject, Retry, current_job
from jsworker.events import JobEvent, decode_event
from jsworker.testing import NatsServer

from ..support import stream_messages_async, wait_until_async
from .workers import in_process_worker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def _app(url: str, events: bool = True) -> App:
    app = App("evt", url, events=events, retry_backoff=0.05, metrics_registry=CollectorRegistry())

    @app.task
    async def ok(n: int) -> int:
        return n

    @app.task
    async def flaky(n: int) -> None:
        if current_job().attempt == 1:
            raise Retry(delay=0.05, reason="first attempt fails")

    @app.task
    async def refuse(n: int) -> None:
        raise Reject("never")

    return app


async def _events(url: str, stream: str, expect: int, timeout: float = 15.0) -> list[JobEvent]:
    await wait_until_async(
        lambda: stream_messages_async(url, stream),
        until=lambda n: n >= expect,
        timeout=timeout,
        message=f"{expect} events in {stream}",
    )
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        sub = await js.pull_subscribe(">", stream=stream)
        out: list[JobEvent] = []
        while len(out) < expect:
            for msg in await sub.fetch(expect - len(out), timeout=5):
                event = decode_event(msg.data)
                assert event is not None
                out.append(event)
        return out
    finally:
        await nc.close()


async def test_every_step_of_every_job_is_an_event(nats_server: NatsServer) -> None:
    app = _app(nats_server.url)
    async with in_process_worker(app) as worker:
        await app.tasks["ok"].aapply((1,), job_id="ok-1")
        await app.tasks["flaky"].aapply((2,), job_id="flaky-1")
        await app.tasks["refuse"].aapply((3,), job_id="refuse-1")
        await app.tasks["ok"].aapply((1,), job_id="ok-1")  # a duplicate: no event
        # ok: enq, started, succeeded; flaky: enq, started, failed, retried, started, succeeded;
        # refuse: enq, started, failed, dead_lettered
        events = await _events(nats_server.url, "JSW_EVT_EVENTS", 3 + 2 + 5 + 3)
        assert worker.counts["succeeded"] == 2
    # Stream order follows arrival: a worker may report "started" before the producer has its
    # acknowledgement and reports "enqueued" (stamped with the enqueue time). Time orders them.
    events.sort(key=lambda e: e.ts)
    by_job: dict[str, list[str]] = defaultdict(list)
    for e in events:
        by_job[e.job_id].append(e.event)
    assert by_job["ok-1"] == ["enqueued", "started", "succeeded"]
    assert by_job["flaky-1"] == ["enqueued", "started", "failed", "retried", "started", "succeeded"]
    assert by_job["refuse-1"] == ["enqueued", "started", "failed", "dead_lettered"]

    flaky = [e for e in events if e.job_id == "flaky-1"]
    assert [e.attempt for e in flaky] == [None, 1, 1, 1, 2, 2]
    assert flaky[2].outcome == "retry" and flaky[2].reason == "first attempt fails"
    assert flaky[3].delay == pytest.approx(0.05)
    first_start = flaky[1]
    assert first_start.enqueued_at == pytest.approx(flaky[0].ts)
    assert first_start.queue_wait is not None and 0 <= first_start.queue_wait < 5
    assert flaky[-1].duration is not None and flaky[-1].duration >= 0
    refused = [e for e in events if e.job_id == "refuse-1"][-1]
    assert refused.outcome == "rejected" and refused.reason == "never"
    assert {e.queue for e in events} == {"default"}
    assert all(e.worker and ":" in e.worker for e in events)


async def test_a_job_that_never_started_gets_dead_lettered_alone(nats_server: NatsServer) -> None:
    """A message naming no declared task: one dead_lettered event under the _unknown subject."""
    app = _app(nats_server.url)
    async with in_process_worker(app):
        nc = await nats.connect(nats_server.url)
        await nc.jetstream().publish(
            "jsw.evt.q.default.ghost", b"{}", headers={"Nats-Msg-Id": "g1", "Jsw-Task": "gh.o*st"}
        )
        await nc.close()
        (event,) = await _events(nats_server.url, "JSW_EVT_EVENTS", 1)
    assert event.event == "dead_lettered" and event.outcome == "bad_input"
    assert event.task == "_unknown" and event.job_id == "g1"


async def test_no_events_stream_without_the_option(nats_server: NatsServer) -> None:
    app = _app(nats_server.url, events=False)
    async with in_process_worker(app) as worker:
        await app.tasks["ok"].aapply((1,))
        await wait_until_async(
            lambda: worker.counts["succeeded"] >= 1, timeout=10, message="the job to succeed"
        )
    nc = await nats.connect(nats_server.url)
    try:
        names = [s.config.name for s in await nc.jetstream().streams_info()]
    finally:
        await nc.close()
    assert "JSW_EVT_EVENTS" not in names and "JSW_EVT" in names


async def test_unique_jobs_enqueue_with_events_on(nats_server: NatsServer) -> None:
    """A unique job carries no dedup key: its enqueue still succeeds and tells of itself, now
    or delayed, and a second call while it waits is a duplicate with no event."""
    app = _app(nats_server.url)

    @app.task(unique=True)
    async def once(n: int) -> int:
        return n

    first = await once.adelay(1)
    again = await once.adelay(1)
    later = await once.aapply((2,), countdown=60)
    assert not first.duplicate and again.duplicate and again.id == first.id and not later.duplicate
    events = await _events(nats_server.url, "JSW_EVT_EVENTS", 2)
    assert sorted((e.event, e.job_id) for e in events) == sorted(
        [("enqueued", first.id), ("scheduled", later.id)]
    )
    await app.aclose()


async def test_the_callers_own_headers_travel_with_the_enqueued_event(nats_server: NatsServer) -> None:
    app = _app(nats_server.url)
    job = await app.tasks["ok"].aapply((1,), headers={"X-Tenant": "acme"})
    (event,) = await _events(nats_server.url, "JSW_EVT_EVENTS", 1)
    assert (event.event, event.job_id, event.headers) == ("enqueued", job.id, {"X-Tenant": "acme"})
    await app.aclose()
