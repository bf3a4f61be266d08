"""What ``Admin(app)`` reads for a dashboard beyond listings, against a real nats-server: job
events counted per queue and time bucket, one job's events timeline, the running jobs by
worker, and a workflow's status."""

from __future__ import annotations

import asyncio
import time

import pytest

from jsworker import App, EventsNotFound, JobNotFound, Reject, Retry, current_job
from jsworker._lifecycle.lookup import RESERVED, UNHELD
from jsworker._lifecycle.state import JobState
from jsworker.admin import Admin
from jsworker.events import JobEvent
from jsworker.events._window import EventCounts, JobTimeline, job_events
from jsworker.jetstream.connection import Connection
from jsworker.testing import NatsServer
from jsworker.workflows import chain, group

from ..events_data import store_events
from ..support import connected, wait_until_async
from .workers import Holding, in_process_worker

pytestmark = pytest.mark.anyio


def _total(counts: EventCounts, queue: str, kind: str) -> int:
    return sum(counts.counts.get((queue, kind), {}).values())


async def test_event_counts_per_queue_and_bucket_then_only_what_came_since(nats_server: NatsServer) -> None:
    app = App("evc", nats_server.url, events=True)
    app.queue("mail")

    @app.task
    async def work(n: int) -> None: ...

    @app.task(queue="mail", max_retries=0)
    async def send(n: int) -> None:
        raise Reject("no")

    async with in_process_worker(app) as _, Admin(app) as admin:
        await work.adelay_many([(n,) for n in range(12)])
        await send.adelay_many([(n,) for n in range(3)])

        def settled(counts: EventCounts) -> bool:
            return _total(counts, "default", "started") == 12 and _total(counts, "mail", "dead_lettered") == 3

        first = await wait_until_async(lambda: admin.event_counts(), until=settled, timeout=20)
        assert _total(first, "mail", "started") == 3 and _total(first, "default", "dead_lettered") == 0
        # Headers only, of the two kinds asked for: 12 + 3 started, 3 dead-lettered.
        assert first.reads == 18 and not first.cut and first.queues() == ["default", "mail"]
        assert first.since <= time.time() - 900 + 30 and first.bucket == 30.0
        rates = first.rates("default", "started")
        assert len(rates) in (30, 31) and sum(rates) > 0

        await work.adelay_many([(n,) for n in range(5)])
        more = await wait_until_async(
            lambda: admin.event_counts(after_seq=first.last_seq),
            until=lambda c: _total(c, "default", "started") == 5,
            timeout=20,
        )
        assert more.reads == 5
        merged = first.merged(more)
        assert _total(merged, "default", "started") == 17 and _total(merged, "mail", "dead_lettered") == 3
        assert merged.last_seq == more.last_seq
        nothing = await admin.event_counts(after_seq=merged.last_seq + 1000)
        assert nothing.reads == 0 and nothing.counts == {}


async def test_a_window_with_too_many_events_is_shortened_to_its_newest_part(nats_server: NatsServer) -> None:
    app = App("evcut", nats_server.url, events=True)

    @app.task
    async def work() -> None: ...

    await app.provision()
    async with Admin(app) as admin:
        conn = await admin.connection()
        subject = app.namespace.event_subject("default", "work", "started")
        for _ in range(50):
            await conn.js.publish(subject, b"{}")
        # The next ones in a later 2-second bucket than the first 50.
        first_bucket = int(time.time() // 2)
        await wait_until_async(lambda: time.time() // 2 > first_bucket, timeout=5, message="a new bucket")
        for _ in range(5):
            await conn.js.publish(subject, b"{}")
        counts = await admin.event_counts(("started",), window=60, bucket=2.0, limit=10)
        assert counts.cut and counts.reads < 55
        # What was read was the newest part of the window, every event of it counted.
        assert _total(counts, "default", "started") == counts.reads >= 5
        assert counts.since > time.time() - 60
        # Catching up on more than the limit since a previous read starts a fresh window.
        fresh = await admin.event_counts(("started",), window=60, bucket=2.0, limit=10, after_seq=1)
        assert fresh.cut and fresh.merged(fresh) is fresh
    await app.aclose()


async def test_no_events_stream(nats_server: NatsServer) -> None:
    app = App("noev", nats_server.url)

    @app.task
    async def work() -> None: ...

    await app.provision()
    job = await work.adelay()
    async with Admin(app) as admin:
        with pytest.raises(EventsNotFound):
            await admin.event_counts()
        with pytest.raises(EventsNotFound):
            await admin.job_events(job.id)
    await app.aclose()


async def test_a_jobs_events_timeline_from_its_enqueue_to_its_end(nats_server: NatsServer) -> None:
    app = App("evt", nats_server.url, events=True, retry_backoff=0.05)
    gate = asyncio.Event()

    @app.task(max_retries=2)
    async def flaky() -> None:
        if current_job().attempt == 1:
            raise Retry(0.05, reason="once more")

    @app.task(max_retries=0)
    async def broken() -> None:
        raise ValueError("it broke")

    @app.task(store_result=True)
    async def noisy(n: int) -> None: ...

    @app.task
    async def hold() -> None:
        await gate.wait()

    async with in_process_worker(app) as _, Admin(app) as admin:
        retried = await flaky.adelay()
        failed = await broken.adelay()
        held = await hold.adelay()
        await wait_until_async(lambda: admin.job(retried.id), until=lambda s: s.state is JobState.SUCCEEDED)
        await wait_until_async(lambda: admin.job(failed.id), until=lambda s: s.state is JobState.FAILED)
        await wait_until_async(lambda: admin.job(held.id), until=lambda s: s.state is JobState.RUNNING)

        def steps(timeline: JobTimeline) -> list[tuple[str, int | None]]:
            return [(e.event, e.attempt) for e in timeline.events]

        # A job that succeeded after a retry: found from its last run, then from its enqueue
        # (its started events say when that was).
        retried_line = await wait_until_async(
            lambda: admin.job_events(retried.id), until=lambda t: len(t.events) == 6, timeout=20
        )
        assert steps(retried_line) == [
            ("enqueued", None),
            ("started", 1),
            ("failed", 1),
            ("retried", 1),
            ("started", 2),
            ("succeeded", 2),
        ]
        assert retried_line.subject == "jsw.evt.ev.default.flaky.*" and not retried_line.cut
        failed_line = await wait_until_async(
            lambda: admin.job_events(failed.id), until=lambda t: len(t.events) == 4, timeout=20
        )
        assert steps(failed_line) == [("enqueued", None), ("started", 1), ("failed", 1), ("dead_lettered", 1)]
        assert failed_line.events[2].reason and "it broke" in failed_line.events[2].reason
        # A running job: from the enqueue its message's headers name.
        held_line = await wait_until_async(
            lambda: admin.job_events(held.id), until=lambda t: len(t.events) == 2, timeout=20
        )
        assert steps(held_line) == [("enqueued", None), ("started", 1)]

        # The job's events are looked for among its task's, up to the limit.
        first = await noisy.adelay(0)
        await noisy.adelay_many([(n,) for n in range(1, 30)])
        await wait_until_async(lambda: admin.job(first.id), until=lambda s: s.state is JobState.SUCCEEDED)
        whole = await wait_until_async(
            lambda: admin.job_events(first.id), until=lambda t: len(t.events) == 3, timeout=20
        )
        assert steps(whole) == [("enqueued", None), ("started", 1), ("succeeded", 1)] and not whole.cut
        cut = await admin.job_events(first.id, limit=2)
        # Cut after two events of the task read (unless the second one was the job's last).
        assert cut.reads == 2 and set(cut.events) <= set(whole.events)
        assert cut.cut or steps(cut)[-1] == ("succeeded", 1)
        gate.set()


async def test_running_jobs_are_grouped_by_their_worker(nats_server: NatsServer) -> None:
    holding = Holding(App("byw", nats_server.url))
    app, gate, started, hold = holding.app, holding.gate, holding.started, holding.hold

    await app.provision()
    held = [await hold.adelay(n) for n in range(3)]
    await app.aclose()
    async with in_process_worker(app, concurrency=4), Admin(app) as admin:
        await wait_until_async(lambda: len(started) == 3, timeout=10, message="three jobs to start")
        (worker,) = await wait_until_async(admin.workers, timeout=10, message="the worker's entry")
        running = await admin.running_jobs()
        assert list(running.workers) == [worker.id] and running.unheld == () and not running.more
        assert [j.id for j in running.workers[worker.id]] == [j.id for j in held]
        assert all(j.started_at is not None and j.attempts == 1 for j in running.workers[worker.id])
        assert (await admin.running_jobs(limit=2)).more
        gate.set()


async def test_reserved_jobs_are_told_apart_from_running_ones(nats_server: NatsServer) -> None:
    """A job a live worker started is running; one in its buffer, not started, is reserved
    (queued, with the reason), and so is one handed to a consumer that no worker answers for
    (its worker gone): neither is listed as running."""
    holding = Holding(App("rsv", nats_server.url))
    app, gate, started, hold = holding.app, holding.gate, holding.started, holding.hold

    await app.provision()
    gone = [await hold.adelay(n) for n in range(2)]
    # A worker that took two jobs and died: the server still counts them handed out.
    async with connected(nats_server.url) as nc:
        taken = await nc.jetstream().pull_subscribe_bind("default", stream="JSW_RSV")
        assert len(await taken.fetch(2, timeout=5)) == 2
    held = [await hold.adelay(n) for n in range(2, 4)]
    await app.aclose()
    async with in_process_worker(app, concurrency=1, max_messages=2), Admin(app) as admin:
        await wait_until_async(lambda: started == [2], timeout=10, message="one job to start")
        running = (await admin.jobs(state="running")).items
        assert [(j.id, j.state, j.reason) for j in running] == [(held[0].id, JobState.RUNNING, None)]
        reserved = await wait_until_async(
            lambda: admin.jobs(state="reserved"), until=lambda p: len(p.items) == 3, timeout=10
        )
        reasons = {j.id: (j.state, j.reason, j.worker is not None) for j in reserved.items}
        assert reasons == {
            **{j.id: (JobState.QUEUED, UNHELD, False) for j in gone},
            **{j.id: (JobState.QUEUED, RESERVED, True) for j in held[1:]},
        }
        statuses = [await app.astatus(j.id) for j in (gone[0], held[0], held[1])]
        assert [(s.state, s.reason) for s in statuses] == [
            (JobState.QUEUED, UNHELD),
            (JobState.RUNNING, None),
            (JobState.QUEUED, RESERVED),
        ]
        assert statuses[1].started_at is not None and statuses[2].started_at is None
        gate.set()


async def test_a_due_retry_no_worker_has_taken_yet_is_retrying_not_held_by_a_gone_worker(
    nats_server: NatsServer,
) -> None:
    """A job waiting out a retry's delay stays on the server as handed out; once due, it waits
    for a worker to ask for more (all busy, or none running). Nobody holds it then, and that
    is no worker gone: it is listed, counted and looked up as retrying, due, with its reason,
    and not among the jobs held by no live worker."""
    app = App("due", nats_server.url)
    tried: list[int] = []

    @app.task
    async def flaky(n: int) -> None:
        tried.append(n)
        # Long enough that the worker surely stops before the retry comes due, even when a
        # loaded machine takes a second over the status reads below (0.5 s was not).
        raise Retry(delay=3, reason="not yet")

    await app.provision()
    job = await flaky.adelay(1)
    async with in_process_worker(app):
        await wait_until_async(lambda: tried == [1], timeout=10, message="the first attempt")
        await wait_until_async(
            lambda: app.astatus(job.id),
            until=lambda s: s.state is JobState.RETRYING,
            timeout=10,
            message="the retry's record",
        )
    status = await app.astatus(job.id)
    assert status.next_attempt_at is not None
    due = status.next_attempt_at.timestamp()
    # The worker stopped before the retry came due: the server holds it, due, for nobody.
    assert tried == [1]
    await wait_until_async(lambda: time.time() > due + 0.1, timeout=10, message="the retry to be due")
    async with Admin(app) as admin:
        running = await admin.running_jobs()
        assert running.unheld == () and running.workers == {}
        retrying = (await admin.jobs(state="retrying")).items
        assert [(j.id, j.state, j.reason) for j in retrying] == [(job.id, JobState.RETRYING, "not yet")]
        assert (await admin.jobs(state="reserved")).items == ()
    again = await app.astatus(job.id)
    assert (again.state, again.reason) == (JobState.RETRYING, "not yet")
    await app.aclose()


async def test_a_workflows_status_and_the_workflow_of_a_step(nats_server: NatsServer) -> None:
    app = App("wfa", nats_server.url, workflows=True)
    gate = asyncio.Event()

    @app.task
    async def add(x: int, y: int) -> int:
        return x + y

    @app.task(max_retries=0)
    async def refuse(x: int) -> int:
        raise Reject(f"no {x}")

    @app.task
    async def hold(x: int) -> int:
        await gate.wait()
        return x

    @app.task
    async def plain() -> None: ...

    async with in_process_worker(app) as _, Admin(app) as admin:
        stopped = await chain(add.s(1, 2), refuse.s(), add.s(10)).aapply()
        status = await wait_until_async(
            lambda: admin.workflow(stopped.id), until=lambda s: s.state != "running", timeout=20
        )
        assert (status.kind, status.state, status.at) == ("chain", "failed", "1")
        assert "no 3" in status.reason
        first, second, third = status.steps
        assert first is not None and first.id == stopped.id
        assert second is not None and second.state is JobState.FAILED and third is None
        # A step no longer held by the server is found by its id.
        assert second.id == f"{stopped.id}-1"
        assert await admin.workflow_of(second.id) == stopped.id
        assert await admin.workflow_of(stopped.id) == stopped.id

        waiting = await group([hold.s(1), hold.s(2)]).aapply()
        running = await admin.workflow(waiting.id)
        assert (running.kind, running.state, running.ended_members) == ("group", "running", 0)
        await wait_until_async(
            lambda: admin.job(f"{waiting.id}-m0"), until=lambda s: s.state is JobState.RUNNING, timeout=20
        )
        # A step the server holds names its workflow in its headers.
        assert await admin.workflow_of(f"{waiting.id}-m0") == waiting.id
        gate.set()
        done = await wait_until_async(
            lambda: admin.workflow(waiting.id), until=lambda s: s.state == "succeeded", timeout=20
        )
        assert done.ended_members == 2

        lone = await plain.adelay()
        assert await admin.workflow_of(lone.id) is None
        with pytest.raises(JobNotFound):
            await admin.workflow("f" * 32)


async def test_a_timeline_finds_an_enqueue_stored_after_the_jobs_end(nats_server: NatsServer) -> None:
    """A producer publishes a job's ``enqueued`` once the job was acknowledged: a fast job can
    start and end before it is stored. The timeline still shows it, and stops reading soon
    after (the events of other jobs stored later are not read)."""
    app = App("late", nats_server.url, events=True)
    now = time.time()

    def event(kind: str, job: str, at: float) -> JobEvent:
        attempt = None if kind == "enqueued" else 1
        return JobEvent(
            event=kind, job_id=job, task="t", queue="default", ts=at, attempt=attempt, enqueued_at=now
        )

    await store_events(
        app,
        [
            event("started", "fast", now + 0.001),
            event("succeeded", "fast", now + 0.002),
            event("enqueued", "other", now + 0.003),
            event("enqueued", "fast", now),  # stored last, stamped first
            *(event("enqueued", f"later-{i}", now + 1) for i in range(3)),
        ],
    )
    conn = await Connection.open(app.connect_options("operator", "test"))
    try:
        timeline = await job_events(
            conn, app.namespace, "fast", queue="default", task="t", since=now, ended="succeeded"
        )
    finally:
        await conn.close()
    assert [e.event for e in timeline.events] == ["enqueued", "started", "succeeded"]
    assert timeline.reads == 4 and not timeline.cut
