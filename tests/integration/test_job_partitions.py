"""Queues spread over several job streams (``App(partitions=N)``): each job lands in the stream
its id names, workers pull from every partition, and what finds a job by its id (status,
cancel, results, unique keys, delayed jobs, replays) finds it in any of them."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from jsworker import Admin, App, JobState, Task, current_job
from jsworker._enqueue.task import unique_key
from jsworker._scheduling.admin import Schedules
from jsworker._wire.names import partition_of
from jsworker.admin import QueueStatus
from jsworker.admin._doctor import diagnose
from jsworker.jetstream.connection import Connection
from jsworker.jetstream.inspect import consumer_facts, stream_facts

from ..support import wait_until_async
from .workers import in_process_worker

if TYPE_CHECKING:
    from jsworker.testing import NatsServer

pytestmark = pytest.mark.anyio

PARTITIONS = 4


def unique_id(task: Task[[str], Any], key: str) -> str:
    """The job id of ``task``'s unique call with ``key``."""
    return unique_key(task, (key,), {})


def ids_per_partition(prefix: str, each: int = 1) -> list[str]:
    """``each`` job ids for every partition, in partition order."""
    found: dict[int, list[str]] = {k: [] for k in range(PARTITIONS)}
    n = 0
    while any(len(ids) < each for ids in found.values()):
        job_id = f"{prefix}-{n}"
        n += 1
        if len(found[partition_of(job_id, PARTITIONS)]) < each:
            found[partition_of(job_id, PARTITIONS)].append(job_id)
    return [job_id for k in range(PARTITIONS) for job_id in found[k]]


async def stored_in(url: str, app: App) -> list[int]:
    """How many messages each partition's job stream holds now."""
    conn = await Connection.open(app.connect_options("operator"))
    try:
        ns = app.namespace
        found = [
            await stream_facts(conn, ns.partition_stream(k), ns.partition_subjects(k))
            for k in range(PARTITIONS)
        ]
        return [sum((f.subjects or {}).values()) for f in found]
    finally:
        await conn.close()


def test_a_job_lands_in_the_partition_its_id_names() -> None:
    app = App("spread", partitions=PARTITIONS)
    app.queue("single", max_running=2)
    app.queue("wide", partitions=8)
    assert app.queue_partitions("default") == PARTITIONS
    assert app.queue_partitions("single") == 1  # the server's max_running is one consumer's
    assert app.queue_partitions("wide") == 8
    assert app.partition_count == 8
    ns = app.namespace
    subject = ns.job_subject("default", "t", "abc", app.job_partition("default", "abc"))
    assert ns.stream_of(subject) == ns.partition_stream(partition_of("abc", PARTITIONS))
    assert ns.parse_job_subject(subject) == ("default", "t")
    assert [s.name for s in app.stream_specs((2, 12, 0))][:8] == [
        "JSW_SPREAD",
        *(f"JSW_SPREAD_P{k}" for k in range(1, 8)),
    ]


async def test_jobs_spread_over_every_partition_and_each_runs_once(nats_server: NatsServer) -> None:
    app = App("spread", nats_server.url, partitions=PARTITIONS, results=True)
    ran: Counter[int] = Counter()

    @app.task
    async def work(i: int) -> int:
        ran[i] += 1
        return i * 2

    jobs = await work.adelay_many([(i,) for i in range(2000)])
    held = await stored_in(nats_server.url, app)
    # Every partition took a share (2,000 ids over 4 streams: far from empty each).
    assert all(n > 300 for n in held), held
    assert sum(held) == 2000
    async with in_process_worker(app, concurrency=32):
        await wait_until_async(
            lambda: len(ran), until=lambda n: n == 2000, timeout=60, message="every job to run"
        )
        for i in (0, 1999):
            assert await jobs[i].aresult(timeout=10) == i * 2
    assert set(ran.values()) == {1}
    assert await stored_in(nats_server.url, app) == [0] * PARTITIONS
    await app.aclose()


async def test_status_cancel_results_and_unique_keys_in_every_partition(nats_server: NatsServer) -> None:
    app = App("lookups", nats_server.url, partitions=PARTITIONS, results=True)
    release = asyncio.Event()

    @app.task
    async def hold(i: int) -> int:
        await release.wait()
        return i

    @app.task(unique=True)
    async def once(key: str) -> str:
        await release.wait()
        return key

    waiting = ids_per_partition("wait")
    for i, job_id in enumerate(waiting):
        await hold.aapply((i,), job_id=job_id)
    for job_id in waiting:
        status = await app.astatus(job_id)
        assert status.state is JobState.QUEUED, (job_id, status)
    # Cancelled while queued, one in each partition: gone from its stream.
    assert all([await app.acancel(job_id) for job_id in waiting])
    assert await stored_in(nats_server.url, app) == [0] * PARTITIONS
    assert [(await app.astatus(j)).state for j in waiting] == [JobState.CANCELLED] * PARTITIONS

    # Unique keys whose ids would fall in every partition stay in partition 0, where the
    # server's one check sees every form of a key: a second enqueue finds the first.
    keys: dict[int, str] = {}
    n = 0
    while len(keys) < PARTITIONS:
        first = await once.adelay(f"k{n}")
        keys.setdefault(partition_of(first.id, PARTITIONS), f"k{n}")
        n += 1
    for key in keys.values():
        again = await once.adelay(key)
        assert again.duplicate, key
    assert await stored_in(nats_server.url, app) == [n, 0, 0, 0]

    running = ids_per_partition("run")
    jobs = [await hold.aapply((i,), job_id=job_id) for i, job_id in enumerate(running)]
    async with in_process_worker(app, concurrency=64):
        for job_id in running:
            await wait_until_async(
                lambda job_id=job_id: app.astatus(job_id),  # type: ignore[misc]
                until=lambda s: s.state is JobState.RUNNING,
                timeout=10,
                message=f"{job_id} to run",
            )
        # Cancelled while running, in partition 1 (the others finish).
        assert await app.acancel(running[1])
        release.set()
        results = [await job.aresult(timeout=10) for k, job in enumerate(jobs) if k != 1]
        assert results == [0, 2, 3]
        assert (await app.astatus(running[1])).state is JobState.CANCELLED
    await app.aclose()


async def test_delayed_jobs_and_replays_go_to_their_partitions(nats_server: NatsServer) -> None:
    app = App("later", nats_server.url, partitions=PARTITIONS, max_retries=0)
    ran: Counter[str] = Counter()

    @app.task
    async def job(job_name: str, fail: bool) -> None:
        ran[job_name] += 1
        if fail and ran[job_name] == 1:
            raise ValueError("first run fails")

    ids = ids_per_partition("soon")
    for job_id in ids:
        await job.aapply((job_id, False), job_id=job_id, countdown=0.2)
    failing = ids_per_partition("again")
    for job_id in failing:
        await job.aapply((job_id, True), job_id=job_id)
    async with in_process_worker(app, concurrency=8):
        await wait_until_async(
            lambda: sum(ran.values()),
            until=lambda n: n == 2 * PARTITIONS,
            timeout=30,
            message="the jobs to run",
        )
        admin = Admin(app)
        letters = (await admin.dead_letters()).items
        assert len(letters) == PARTITIONS
        await admin.replay_dead_letters(all=True)
        await wait_until_async(
            lambda: sum(ran.values()),
            until=lambda n: n == 3 * PARTITIONS,
            timeout=30,
            message="the replays to run",
        )
        await admin.aclose()
    # Each delayed job ran in its own partition: every partition's consumer delivered one.
    conn = await Connection.open(app.connect_options("operator"))
    try:
        for k in range(PARTITIONS):
            (facts,) = [
                c
                for c in await consumer_facts(conn, app.namespace.partition_stream(k))
                if c.name == "default"
            ]
            assert facts.delivered_consumer_seq == 3, (k, facts)
    finally:
        await conn.close()
    assert set(ran.values()) == {1, 2}
    await app.aclose()


async def test_a_queue_paused_is_paused_in_every_partition(nats_server: NatsServer) -> None:
    app = App("paused", nats_server.url, partitions=PARTITIONS)

    @app.task
    async def job(i: int) -> None: ...

    await app.provision()
    admin = Admin(app)
    try:
        await admin.pause_queue("default", datetime.now(UTC) + timedelta(hours=1))
        (status,) = [q for q in await admin.queues() if q.queue == "default"]
        assert status.paused
        jobs = await job.adelay_many([(i,) for i in range(40)])

        async def default_queue() -> QueueStatus:
            (status,) = [q for q in await admin.queues() if q.queue == "default"]
            return status

        # A consumer counts a stored job as pending a moment after the server acked it.
        status = await wait_until_async(
            default_queue, until=lambda s: s.pending == 40, message="40 jobs pending over the partitions"
        )
        assert status.paused and status.in_flight == 0
        listed = await admin.jobs(state="queued", limit=15)
        seen = list(listed.items)
        while listed.next_after is not None:
            listed = await admin.jobs(state="queued", limit=15, after=listed.next_after)
            seen += listed.items
        assert sorted(j.id for j in seen) == sorted(j.id for j in jobs)
        assert await admin.purge_queue("default") == 40
        assert await admin.resume_queue("default")
    finally:
        await admin.aclose()
        await app.aclose()


def _counting_app(
    url: str, ran: Counter[str], **options: Any
) -> tuple[App, Task[[int], Any], Task[[str], Any]]:
    """App ``grow`` with ``options``: a task counting its runs and a unique one."""
    app = App("grow", url, **options)

    @app.task
    async def work(i: int) -> None:
        await asyncio.sleep(0.001)
        ran[str(i)] += 1

    @app.task(unique=True)
    async def once(key: str) -> None:
        ran[key] += 1

    return app, work, once


async def test_going_from_one_partition_to_four_under_load_loses_and_doubles_nothing(
    nats_server: NatsServer,
) -> None:
    """Producers and workers move from one partition to four while jobs flow: the old layout's
    jobs still run, unique keys and lookups see them, nothing runs twice, and the doctor says
    when the layout before can go."""
    ran: Counter[str] = Counter()
    old, old_work, old_once = _counting_app(nats_server.url, ran)
    new, new_work, new_once = _counting_app(
        nats_server.url, ran, partitions=PARTITIONS, previous_partitions=1
    )
    await old_work.adelay_many([(i,) for i in range(3000)])
    # A unique job of the old layout whose key the new one places in another partition.
    key = next(f"k{n}" for n in itertools.count() if partition_of(unique_id(new_once, f"k{n}"), PARTITIONS))
    first = await old_once.adelay(key)
    again = await new_once.adelay(key)
    assert again.duplicate and again.id == first.id
    assert (await new.astatus(first.id)).state is JobState.QUEUED
    async with contextlib.AsyncExitStack() as old_worker:
        await old_worker.enter_async_context(in_process_worker(old, concurrency=8))
        await wait_until_async(
            lambda: len(ran), until=lambda n: n >= 300, timeout=30, message="the old worker to run"
        )
        async with in_process_worker(new, concurrency=8):
            await new_work.adelay_many([(i,) for i in range(3000, 6000)])
            await old_worker.aclose()  # the old worker goes once the new one runs
            await wait_until_async(
                lambda: len(ran), until=lambda n: n == 6001, timeout=60, message="every job to run"
            )
    assert set(ran.values()) == {1}
    assert await stored_in(nats_server.url, new) == [0] * PARTITIONS
    conn = await Connection.open(new.connect_options("operator"))
    try:
        said = [f.message for f in await diagnose(new, conn) if f.check == "partitions"]
    finally:
        await conn.close()
    assert "queue default: no job left in the layout of 1 partitions: previous_partitions can go" in said, (
        said
    )
    await old.aclose()
    await new.aclose()


async def test_fewer_partitions_drain_the_ones_that_go(nats_server: NatsServer) -> None:
    """From four partitions to two: the doctor names the streams that go while they hold jobs,
    and workers that know the layout before run every job there."""
    ran: Counter[str] = Counter()
    wide, wide_work, _ = _counting_app(nats_server.url, ran, partitions=4)
    await wide_work.adelay_many([(i,) for i in range(400)])
    narrow, _, _ = _counting_app(nats_server.url, ran, partitions=2)
    draining, _, _ = _counting_app(nats_server.url, ran, partitions=2, previous_partitions=4)
    conn = await Connection.open(narrow.connect_options("operator"))
    try:
        problems = [f.message for f in await diagnose(narrow, conn) if f.level == "problem"]
        assert [p.split(" holds")[0] for p in problems] == ["JSW_GROW_P2", "JSW_GROW_P3"], problems
        assert all("set previous_partitions to at least" in p for p in problems), problems
        async with in_process_worker(draining, concurrency=16):
            await wait_until_async(
                lambda: len(ran), until=lambda n: n == 400, timeout=30, message="every job to run"
            )
        said = await diagnose(draining, conn)
    finally:
        await conn.close()
    assert not [f for f in said if f.level == "problem"], said
    assert set(ran.values()) == {1}
    for app in (wide, narrow, draining):
        await app.aclose()


async def test_a_partition_with_a_backlog_starves_no_other(nats_server: NatsServer) -> None:
    """A long backlog in one partition, then a few jobs in another: those start while the
    backlog is still long (each partition has a pull loop of its own, and slots go to
    whichever loop has a job), not after it. A prefetch of 64 keeps the backlog's buffer
    from running dry, so that each freed slot is handed on from job to job: the loops of a
    priority take turns at that too."""
    app = App("fairly", nats_server.url, partitions=PARTITIONS)
    done: list[str] = []

    @app.task
    async def job(tag: str) -> None:
        await asyncio.sleep(0.002)
        done.append(tag)

    backlog = [j for j in ids_per_partition("b", 2000) if partition_of(j, PARTITIONS) == 0]
    for job_id in backlog:
        await job.aapply(("backlog",), job_id=job_id)
    async with in_process_worker(app, concurrency=4, max_messages=64):
        await wait_until_async(
            lambda: len(done), until=lambda n: n >= 50, timeout=30, message="the backlog to start"
        )
        late = [j for j in ids_per_partition("late", 5) if partition_of(j, PARTITIONS) == 2]
        for job_id in late:
            await job.aapply(("late",), job_id=job_id)
        await wait_until_async(
            lambda: done.count("late"),
            until=lambda n: n == len(late),
            timeout=30,
            message="the late jobs to run",
        )
        left = len(backlog) - done.count("backlog")
    assert left > len(backlog) // 2, f"the late jobs waited for the backlog: {left} of it left"
    await app.aclose()


async def test_periodic_ticks_go_to_the_partition_of_their_id(nats_server: NatsServer) -> None:
    """A schedule's ticks are moved into the partitions their ids name, as producers place
    jobs: once the schedule is paused and the last tick ran, each partition's consumer has
    handed out exactly the ticks whose ids fall in it."""
    app = App("ticks", nats_server.url, partitions=PARTITIONS)
    ran: list[str] = []

    @app.task
    async def tick(label: str) -> None:
        ran.append(current_job().id)

    app.schedule(tick, every=1, name="beat", args=("beat",))
    conn = await Connection.open(app.connect_options("operator"))

    async def delivered() -> list[int]:
        return [
            sum(
                c.delivered_consumer_seq
                for c in await consumer_facts(conn, app.namespace.partition_stream(k))
            )
            for k in range(PARTITIONS)
        ]

    def expected() -> list[int]:
        placed = Counter(partition_of(job_id, PARTITIONS) for job_id in ran)
        return [placed[k] for k in range(PARTITIONS)]

    try:
        async with in_process_worker(app):
            await wait_until_async(
                lambda: len(ran), until=lambda n: n >= 3, timeout=20, message="three ticks"
            )
            async with Schedules(app) as schedules:
                assert await schedules.pause("beat")
            # A tick fired as the pause landed still arrives and runs; then the counts agree.
            await wait_until_async(
                delivered,
                until=lambda found: found == expected(),
                timeout=15,
                message="every tick delivered from the partition of its id",
            )
    finally:
        await conn.close()
    assert len(set(ran)) == len(ran)
    await app.aclose()
